#!/usr/bin/env bash
# The newcomer path: follows the README's quick start as someone new would,
# and fails, saying which step, if it does not end with the hello job done.
#
#   bash scripts/newcomer.sh          (NEWCOMER_TIMEOUT=600: seconds in all, builds included)
#
# It reads the commands from the README's code blocks marked `sh newcomer`,
# so the README and this script cannot drift apart: the lines that start the
# sample endpoint and the node run in the background, the others in order,
# `job show` again until the job is done. `go run .` and
# `go run ./examples/hello` are built once instead (the same code, without a
# build per command). Everything runs in a temporary folder holding a copy
# of config.yaml, so the node's SQLite file is new and the clone untouched.
# Everything it started is stopped at the end, by process id.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
limit=${NEWCOMER_TIMEOUT:-600}
tmp=$(mktemp -d)
work=$tmp/work
bin=$tmp/bin
mkdir -p "$work" "$bin"
pids=()
names=()
step="starting"

left() { echo $((limit - SECONDS)); }

stop_all() {
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    local pid=${pids[$i]}
    kill -0 "$pid" 2>/dev/null || continue
    kill -TERM "$pid" 2>/dev/null || true
    # A node drains before it exits; give it its stop time, then insist.
    for _ in $(seq 1 300); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "newcomer: ${names[$i]} (pid $pid) did not stop within 30 s of SIGTERM; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  done
  pids=()
  names=()
}

fail() {
  echo "newcomer: FAILED at: $step" >&2
  echo "newcomer: $*" >&2
  for log in "$work"/*.log; do
    [ -e "$log" ] || continue
    echo "---- last lines of $(basename "$log")" >&2
    tail -n 20 "$log" >&2
  done
  stop_all
  rm -rf "$tmp"
  exit 1
}
trap 'fail "interrupted"' INT TERM
trap 'stop_all; rm -rf "$tmp"' EXIT

# 1. The README's commands.
step="reading the README's quick start (blocks marked 'sh newcomer')"
mapfile -t lines < <(awk '/^```sh newcomer[[:space:]]*$/ {on = 1; next} /^```/ {on = 0} on' "$repo/README.md" |
  sed -e 's/[[:space:]]\+#.*$//' -e 's/[[:space:]]*$//' | grep -v '^$')
[ "${#lines[@]}" -gt 0 ] || fail "README.md has no code block marked 'sh newcomer'"
background=()
foreground=()
for line in "${lines[@]}"; do
  case "$line" in
  *'&') background+=("${line%&}") ;;
  *'go run . run'*) background+=("$line") ;;
  *) foreground+=("$line") ;;
  esac
done
printf 'newcomer: README: %s\n' "${lines[@]}"
have() { printf '%s\n' "$@" | grep -q -- "$pattern"; }
pattern='go run ./examples/hello' have "${background[@]}" || fail "the quick start does not start examples/hello"
pattern='go run \. run' have "${background[@]}" || fail "the quick start does not run a node (go run . run)"
pattern='go run \. enqueue .*-endpoint /jobs/hello' have "${foreground[@]}" || fail "the quick start does not enqueue /jobs/hello"
pattern='go run \. job show 1' have "${foreground[@]}" || fail "the quick start does not show job 1"

# The README's commands, with the two programs built once.
translate() {
  local s=$1
  s=${s//go run .\/examples\/hello/\"$bin\/hello\"}
  s=${s//go run ./\"$bin\/slotpoller\"}
  printf '%s' "$s"
}

# 2. Build.
step="building slotpoller and examples/hello (go build)"
echo "newcomer: $step"
(cd "$repo" && timeout "$(left)" go build -o "$bin/slotpoller" . && timeout "$(left)" go build -o "$bin/hello" ./examples/hello) ||
  fail "the build failed or took longer than NEWCOMER_TIMEOUT ($limit s)"
cp "$repo/config.yaml" "$work/"

# 3. The sample endpoint and the node, in the background.
if (exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null; then
  step="checking port 8080"
  fail "something already listens on 127.0.0.1:8080, where examples/hello must listen; stop it and run again"
fi
i=0
for line in "${background[@]}"; do
  cmd=$(translate "$line")
  step="starting in the background: $line"
  echo "newcomer: $step"
  log=$work/background-$i.log
  (cd "$work" && exec bash -c "exec env $cmd") >"$log" 2>&1 &
  pids+=("$!")
  names+=("$line")
  i=$((i + 1))
  sleep 0.5
  kill -0 "$!" 2>/dev/null || fail "it exited at once"
done

step="waiting for examples/hello to listen on 127.0.0.1:8080"
until (exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null; do
  [ "$(left)" -gt 0 ] || fail "it did not listen in time"
  sleep 0.2
done
step="waiting for the node to check in"
until grep -q 'checked in' "$work"/background-*.log 2>/dev/null; do
  [ "$(left)" -gt 0 ] || fail "the node did not check in in time"
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || fail "a background program exited"; done
  sleep 0.2
done

# 4. The commands of the second terminal, in order.
done_seen=0
for line in "${foreground[@]}"; do
  cmd=$(translate "$line")
  step="$line"
  echo "newcomer: \$ $line"
  case "$line" in
  *'job show'*)
    # The job is due now and runs within a slot or two; read until done.
    deadline=$((SECONDS + 60))
    while :; do
      out=$(cd "$work" && timeout 30 bash -c "$cmd" 2>&1) || fail "exit code $?: $out"
      if grep -Eq '^state[[:space:]]+done$' <<<"$out"; then
        done_seen=1
        break
      fi
      [ "$SECONDS" -lt "$deadline" ] && [ "$(left)" -gt 0 ] || fail "the job did not end done within 60 s: $out"
      sleep 0.5
    done
    ;;
  *)
    out=$(cd "$work" && timeout 60 bash -c "$cmd" 2>&1) || fail "exit code $?: $out"
    case "$line" in
    *' enqueue '*) [ "$out" = 1 ] || fail "enqueue printed '$out', not the id 1 the README's 'job show 1' reads" ;;
    esac
    ;;
  esac
  printf '%s\n' "$out" | sed 's/^/    /'
done
[ "$done_seen" = 1 ] || fail "no 'job show' step saw the job done"

step="checking that examples/hello logged the call"
grep -q 'msg="job call".*X-Slotpoller-Job=1' "$work"/background-*.log || fail "examples/hello logged no call of job 1"

# 5. Stop everything: the node drains, the endpoint shuts down.
step="stopping the node and the sample endpoint"
stop_all
echo "newcomer: passed: the hello job ended done, in $SECONDS s"
