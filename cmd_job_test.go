package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// Times and durations change from run to run; the goldens hold the rest.
var (
	goldenTime = regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z`)
	goldenTook = regexp.MustCompile(` +\d+ms\b`)
	goldenKey  = regexp.MustCompile(`slotpoller-[0-9a-f]{32}`)
)

func scrubTimes(s string) string {
	s = goldenTime.ReplaceAllString(s, "YYYY-MM-DD hh:mm:ss.mmmZ")
	s = goldenKey.ReplaceAllString(s, "slotpoller-KEY")
	return goldenTook.ReplaceAllString(s, "  Nms")
}

func checkGolden(t *testing.T, name, out string) {
	t.Helper()
	golden := filepath.Join(pkgDir, "testdata", name)
	out = scrubTimes(out)
	if *updateGolden {
		require.NoError(t, os.WriteFile(golden, []byte(out), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test -run TestJobCommands -update-golden to write it")
	require.Equal(t, string(want), out)
}

func cliIn(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runWith(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// The job commands on a SQLite farm whose jobs a real runner calls.
func TestJobCommands(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "farm.db")
	cfg := writeConfig(t, "database:\n  dsn: "+dbPath+"\njobs:\n  max_attempts: 2\n")
	code, _, errOut := cli(t, "schema", "migrate", "-config", cfg)
	require.Equal(t, 0, code, errOut)

	enqueue := func(stdin string, args ...string) int64 {
		t.Helper()
		code, out, errOut := cliIn(t, stdin, append(append([]string{"enqueue"}, args...), "-config", cfg)...)
		require.Equal(t, 0, code, errOut)
		id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		require.NoError(t, err, out)
		return id
	}
	payload := filepath.Join(dir, "body.json")
	require.NoError(t, os.WriteFile(payload, []byte(`{"from":"file"}`), 0o600))
	ok := enqueue("", "-endpoint", "/jobs/ok", "-payload-file", payload)
	failing := enqueue(`{"from":"stdin"}`, "-endpoint", "/jobs/fail", "-payload-file", "-", "-unique-key", "fail-1")
	later := enqueue("", "-endpoint", "/jobs/later", "-in", "1h")

	s, err := open.Store(context.Background(), "sqlite", dbPath)
	require.NoError(t, err)
	defer s.Close()
	for id, want := range map[int64]string{ok: `{"from":"file"}`, failing: `{"from":"stdin"}`} {
		j, err := s.JobGet(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, want, string(j.Payload))
	}

	// A node runs them: /jobs/ok succeeds, /jobs/fail answers 503 twice
	// and is dead.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/jobs/fail" {
			w.WriteHeader(503)
			w.Write([]byte("down for maintenance"))
		}
	}))
	defer srv.Close()
	base, _ := url.Parse(srv.URL)
	r := jobs.NewRunner(s, &jobs.Invoker{Base: base}, jobs.Options{Node: "node-a", Incarnation: "inc-a", Capacity: 8,
		Lease: 5 * time.Second, Timeout: 5 * time.Second, Clock: clock.NewFake(time.Now()), Rand: func() float64 { return 0 }})
	for range 2 {
		_, err := r.Poll(context.Background(), jobs.Turn{FarmCapacity: 8, NextPoll: time.Second, StartWindow: time.Second})
		require.NoError(t, err)
		r.Wait()
	}

	code, out, errOut := cli(t, "job", "list", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	checkGolden(t, "job-list.golden", out)

	code, out, errOut = cli(t, "job", "show", strconv.FormatInt(failing, 10), "-config", cfg)
	require.Equal(t, 0, code, errOut)
	checkGolden(t, "job-show-dead.golden", out)

	code, out, errOut = cli(t, "job", "list", "-state", "dead", "-json", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	var page struct {
		Jobs []struct {
			ID    int64  `json:"id"`
			State string `json:"state"`
		} `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &page), out)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, failing, page.Jobs[0].ID)

	// Cancel the waiting one; a finished one is refused (exit 1).
	code, out, errOut = cli(t, "job", "cancel", strconv.FormatInt(later, 10), "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "job "+strconv.FormatInt(later, 10)+" cancelled\n", out)
	code, _, errOut = cli(t, "job", "cancel", strconv.FormatInt(ok, 10), "-config", cfg)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "it is done: only a waiting (ready) or running job can be cancelled")
	code, _, errOut = cli(t, "job", "show", "999999", "-config", cfg)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "job 999999: job not found")

	// Retry the dead one by state: ready again, same idempotency key.
	code, out, errOut = cli(t, "job", "retry", "-state", "dead", "-since", "1h", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "1 dead job is ready again with a fresh attempt budget\n", out)
	code, out, errOut = cli(t, "job", "retry", strconv.FormatInt(later, 10), "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "ready again")

	code, out, errOut = cli(t, "job", "show", strconv.FormatInt(failing, 10), "-json", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	var shown struct {
		State   string `json:"state"`
		History []struct {
			Node    string `json:"node"`
			Outcome string `json:"outcome"`
			Status  int    `json:"status"`
		} `json:"history"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown), out)
	require.Equal(t, "ready", shown.State)
	require.Len(t, shown.History, 3)
	require.Equal(t, "node-a", shown.History[0].Node)
	require.Equal(t, 503, shown.History[1].Status)
	require.Equal(t, "retried", shown.History[2].Outcome)

	code, out, errOut = cli(t, "job", "show", strconv.FormatInt(later, 10), "-config", cfg)
	require.Equal(t, 0, code, errOut)
	checkGolden(t, "job-show-retried.golden", out)

	// Enqueue's unique key is taken: a runtime failure naming the holder.
	code, _, errOut = cli(t, "enqueue", "-endpoint", "/jobs/fail", "-unique-key", "fail-1", "-config", cfg)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `a job with unique key "fail-1" exists (id `+strconv.FormatInt(failing, 10)+")")
}

// job show prints the payload: short text on its row, longer text or
// base64 below the table, cut with the count of the bytes left out.
func TestPayloadText(t *testing.T) {
	row, block := payloadText(nil)
	require.Equal(t, "none", row)
	require.Empty(t, block)

	row, block = payloadText([]byte(`{"from":"stdin"}`))
	require.Equal(t, `16 bytes: {"from":"stdin"}`, row)
	require.Empty(t, block)

	row, _ = payloadText([]byte("x"))
	require.Equal(t, "1 byte: x", row)

	row, block = payloadText([]byte("{\r\n  \"a\": 1\r\n}\r\n"))
	require.Equal(t, "16 bytes, text, below", row)
	require.Equal(t, "payload:\n  {\n    \"a\": 1\n  }\n", block)

	row, block = payloadText([]byte{0, 1, 2, 0xff})
	require.Equal(t, "4 bytes, not printable text: base64, below", row)
	require.Equal(t, "payload (base64):\n  AAEC/w==\n", block)

	row, _ = payloadText([]byte("\x1b[31mred"))
	require.Contains(t, row, "base64", "a terminal escape is not printed raw")

	long := strings.Repeat("é", 3000) // 6000 bytes, 2 a character
	row, block = payloadText([]byte(long))
	require.Equal(t, "6000 bytes, text, below", row)
	require.Equal(t, "payload:\n  "+strings.Repeat("é", 1024)+"\n  … 3952 more bytes\n", block)

	bin := bytes.Repeat([]byte{0xff, 0xfe, 0}, 1000) // 3000 bytes
	_, block = payloadText(bin)
	lines := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
	require.Equal(t, "payload (base64):", lines[0])
	require.Equal(t, "  … 1464 more bytes", lines[len(lines)-1])
	var enc string
	for _, l := range lines[1 : len(lines)-1] {
		require.LessOrEqual(t, len(l), 2+base64Line)
		enc += strings.TrimPrefix(l, "  ")
	}
	require.Equal(t, base64.StdEncoding.EncodeToString(bin[:1536]), enc)
}
