//go:build linux

package install

// The Windows build as a Windows service, under Wine's service manager:
// install, start, a job and a task called by the service, a stop with a
// call in flight (stop pending with rising checkpoints while the node
// drains, the job finished), a restart of a stopped service, uninstall,
// and the foreground verbs. It needs wine, wine64 and
// gcc-mingw-w64-x86-64 (CI installs them) and takes about a minute.
//
// What Wine cannot show, and is therefore only reasoned about (and unit
// tested): Wine's service manager ignores the service's Environment
// value (the node reads its config file here) and its recovery actions,
// and refuses the setting that extends them to failures that are no
// crash (install notes that); its ReportEventW is a stub, so the Event
// Log's entries are read from Wine's debug channel (WINEDEBUG=+eventlog).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// wineStandIn is bcryptprimitives.dll's ProcessPrng, which Go 1.24+ needs
// and Wine 8 lacks, on top of advapi32's RtlGenRandom (SystemFunction036).
// Go loads the DLL from system32 only.
const wineStandIn = `#include <windows.h>
typedef BOOLEAN (WINAPI *gen_t)(PVOID, ULONG);
BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
	static gen_t gen;
	if (!gen) {
		HMODULE m = LoadLibraryA("advapi32.dll");
		if (!m || !(gen = (gen_t)GetProcAddress(m, "SystemFunction036"))) return FALSE;
	}
	while (len > 0) {
		ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
		if (!gen(data, n)) return FALSE;
		data += n; len -= n;
	}
	return TRUE;
}
`

// winePrefix is a Wine prefix of the test's own, with its wineserver kept up
// (services.exe, the service manager, lives as long as it).
type winePrefix struct {
	t      *testing.T
	dir    string // the prefix
	env    []string
	events string // the debug channel's output: the Event Log
}

func TestWindowsServiceUnderWine(t *testing.T) {
	var missing []string
	for _, tool := range []string{"wine", "wineboot", "wineserver", "x86_64-w64-mingw32-gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		t.Skipf("the Windows service test under Wine needs %s: apt-get install wine wine64 gcc-mingw-w64-x86-64 (CI installs them)",
			strings.Join(missing, ", "))
	}
	if testing.Short() {
		t.Skip("the Windows service test under Wine takes about a minute")
	}
	w := newWinePrefix(t)

	// The Windows build, and the endpoints the service calls.
	exe := filepath.Join(w.dir, "drive_c", "slotpoller", "slotpoller.exe")
	build := exec.Command("go", "build", "-o", exe, "..")
	build.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "cross-build: %s", out)
	ep := newWineEndpoints(t)
	config := "database:\n  driver: sqlite\n  dsn: C:\\slotpoller\\farm.db\nnode:\n  name: wine01\n" +
		"jobs:\n  base_url: " + ep.url + "\n  drain_timeout: 15s\nlog:\n  level: info\n"
	require.NoError(t, os.WriteFile(filepath.Join(w.dir, "drive_c", "slotpoller", "config.yaml"), []byte(config), 0o644))
	const cfg = `C:\slotpoller\config.yaml`

	// The foreground verbs.
	out = w.ok("config", "show", "-config", cfg)
	require.Contains(t, string(out), "wine01")
	w.ok("schema", "migrate", "-config", cfg)
	require.Contains(t, string(w.ok("schema", "status", "-config", cfg)), "schema version")
	out, code := w.run(20*time.Second, w.exeArgs("run", "-service", "-config", cfg)...)
	require.Equal(t, 1, code, "%s", out)
	require.Contains(t, string(out), "run -service is what the Windows service manager runs")

	// status without -config, where there is no config file, creates
	// no database.
	out, code = w.run(20*time.Second, w.exeArgs("status")...)
	require.Equal(t, 1, code, "%s", out)
	require.Contains(t, string(out), "service: not installed (windows-service)")
	require.Contains(t, string(out), `no database at Z:`)
	require.NoFileExists(t, filepath.Join(w.cwd(), "slotpoller.db"))

	// install: run -service, error control normal, the stop timeout.
	out = w.ok("install", "-config", cfg)
	require.Contains(t, string(out), `C:\slotpoller\slotpoller.exe run -service -config C:\slotpoller\config.yaml`)
	require.Contains(t, string(out), "stop timeout 40s (jobs.drain_timeout 15s + checkin.ttl 3s + 22s)")
	reg := string(w.wine(20*time.Second, "reg", "query", `HKLM\System\CurrentControlSet\Services\slotpoller`))
	require.Regexp(t, `ImagePath\s+REG_SZ\s+C:\\slotpoller\\slotpoller.exe run -service -config C:\\slotpoller\\config.yaml`, reg)
	require.Regexp(t, `ErrorControl\s+REG_DWORD\s+0x1\b`, reg)
	require.Regexp(t, `PreshutdownTimeout\s+REG_DWORD\s+0x9c40\b`, reg) // 40 s
	require.Contains(t, string(w.ok("status", "-config", cfg)), "service: installed, stopped (windows-service)")
	require.Contains(t, string(w.ok("stop")), `service "slotpoller" already stopped`)

	// A config that does not load: start fails at once, pointing at the
	// Event Log, which says why.
	configPath := filepath.Join(w.dir, "drive_c", "slotpoller", "config.yaml")
	require.NoError(t, os.WriteFile(configPath, []byte(config+"  format: yaml\n"), 0o644))
	began := time.Now()
	out, code = w.run(60*time.Second, w.exeArgs("start")...)
	require.Equal(t, 1, code, "%s", out)
	require.Less(t, time.Since(began), 10*time.Second, "the service manager was told at once, not left to its start timeout")
	require.Contains(t, string(out), "stopped right after its start (exit code 1066, service exit code 1); see the Event Log: Get-WinEvent -ProviderName slotpoller")
	require.Contains(t, w.eventLog(), `slotpoller run: config: log.format = "yaml"`)
	require.NoError(t, os.WriteFile(configPath, []byte(config), 0o644))

	// start; a job and a task called by the service.
	require.Contains(t, string(w.ok("start")), `service "slotpoller" started`)
	require.Contains(t, string(w.ok("start")), `service "slotpoller" already running`)
	require.Contains(t, string(w.ok("status", "-config", cfg)), "service: installed, running (windows-service)")
	w.ok("enqueue", "-config", cfg, "-endpoint", "/job")
	w.ok("task", "add", "-config", cfg, "-name", "feed", "-endpoint", "/task", "-every", "1s")
	ep.await(t, "/job", 30*time.Second)
	ep.await(t, "/task", 30*time.Second)
	require.Contains(t, w.eventLog(), `msg="checked in" node=wine01`)

	// stop with a call in flight: stop pending with rising checkpoints,
	// the drain, the job finished.
	w.ok("task", "delete", "-config", cfg, "-name", "feed")
	w.ok("enqueue", "-config", cfg, "-endpoint", "/slow")
	ep.await(t, "/slow", 30*time.Second)
	stopStart := time.Now()
	first, second := w.async(w.exeArgs("stop")...), (<-chan []byte)(nil)
	var checkpoints []int
	var states []string
	stateRe, checkpointRe := regexp.MustCompile(`STATE\s+:\s+\d+\s+(\w+)`), regexp.MustCompile(`CHECKPOINT\s+:\s+0x([0-9a-fA-F]+)`)
	for len(first) == 0 && time.Since(stopStart) < 60*time.Second {
		q := string(w.wine(10*time.Second, "sc", "query", "slotpoller"))
		m := stateRe.FindStringSubmatch(q)
		require.NotNil(t, m, "sc query: %s", q)
		states = append(states, m[1])
		if m[1] == "STOP_PENDING" {
			c := checkpointRe.FindStringSubmatch(q)
			require.NotNil(t, c, "sc query: %s", q)
			n, _ := strconv.ParseInt(c[1], 16, 64)
			checkpoints = append(checkpoints, int(n))
			if second == nil {
				// status says so during the drain, and a second stop
				// waits for it.
				require.Contains(t, string(w.ok("status", "-config", cfg)), "service: installed, stopping (windows-service)")
				second = w.async(w.exeArgs("stop")...)
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	out = <-first
	took := time.Since(stopStart)
	t.Logf("stop took %v; states %v; stop-pending checkpoints %v", took, states, checkpoints)
	require.Contains(t, string(out), `service "slotpoller" stopped`)
	require.NotNil(t, second, "the stop was never seen pending")
	require.Contains(t, string(<-second), `service "slotpoller" stopped`)
	require.GreaterOrEqual(t, len(checkpoints), 2, "stop-pending checkpoints %v", checkpoints)
	require.IsNonDecreasing(t, checkpoints)
	require.Greater(t, checkpoints[len(checkpoints)-1], checkpoints[0], "the checkpoints rise while the node drains")
	require.True(t, ep.finished("/slow"), "the call in flight ended before the stop did (the drain)")
	require.Contains(t, w.eventLog(), `msg="stopping: draining calls in flight" node=wine01 running=1`)
	require.Contains(t, w.eventLog(), `msg="service stopped"`)
	require.Equal(t, "done", w.jobState(cfg, "/slow"))
	require.Equal(t, "done", w.jobState(cfg, "/job"))
	require.Contains(t, string(w.ok("status", "-config", cfg)), "service: installed, stopped (windows-service)")

	// A node that gives up (its name is in use by a node in a console)
	// stops its service with exit code 1, a failure that is no crash,
	// every time: no exit races Execute's return any more.
	console := w.background(w.exeArgs("run", "-config", cfg)...)
	w.until(30*time.Second, "the console node checks in", func() bool {
		out, _ := w.run(20*time.Second, w.exeArgs("status", "-config", cfg)...)
		return regexp.MustCompile(`wine01\s+true\s+up`).Match(out)
	})
	require.Contains(t, string(w.ok("start")), `service "slotpoller" started`)
	var q string
	w.until(30*time.Second, "the service stops on its own", func() bool {
		q = string(w.wine(10*time.Second, "sc", "query", "slotpoller"))
		return strings.Contains(q, "STOPPED")
	})
	require.Regexp(t, `WIN32_EXIT_CODE\s+:\s+1066\b`, q) // ERROR_SERVICE_SPECIFIC_ERROR
	require.Regexp(t, `SERVICE_EXIT_CODE\s+:\s+1\b`, q)
	require.Contains(t, w.eventLog(), "node stopped on its own; the service manager will restart it")
	require.Contains(t, w.eventLog(), "the node name is in use by another running slotpoller process")
	console()
	w.until(30*time.Second, "the console node's promise runs out", func() bool {
		out, _ := w.run(20*time.Second, w.exeArgs("status", "-config", cfg)...)
		return regexp.MustCompile(`wine01\s+false`).Match(out)
	})

	// restart of a stopped service starts it; uninstall stops and removes it.
	require.Contains(t, string(w.ok("restart")), `service "slotpoller" restarted`)
	require.Contains(t, string(w.ok("status", "-config", cfg)), "service: installed, running (windows-service)")
	out = w.ok("uninstall")
	require.Contains(t, string(out), `uninstalled service "slotpoller"`)
	require.Contains(t, string(w.ok("status", "-config", cfg)), "service: not installed (windows-service)")
	out, code = w.run(20*time.Second, w.exeArgs("start")...)
	require.Equal(t, 1, code)
	require.Contains(t, string(out), "not installed")
}

func newWinePrefix(t *testing.T) *winePrefix {
	dir := t.TempDir()
	w := &winePrefix{t: t, dir: filepath.Join(dir, "prefix"), events: filepath.Join(dir, "events.log")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLOTPOLLER_") && !strings.HasPrefix(kv, "WINE") && !strings.HasPrefix(kv, "DISPLAY=") {
			w.env = append(w.env, kv)
		}
	}
	w.env = append(w.env, "WINEPREFIX="+w.dir, "WINEDLLOVERRIDES=mscoree,mshtml=", "WINEDEBUG=-all")

	// The prefix: Windows 10, and the stand-in in system32. Preparing it
	// starts a second service manager beside the first (winecfg's
	// restart), which answer in turn: the wineserver is ended once ready.
	wineboot := func(events *os.File, args ...string) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		boot := exec.CommandContext(ctx, "wineboot", args...)
		boot.Env = w.env
		if events != nil {
			boot.Env = append(w.env[:len(w.env):len(w.env)], "WINEDEBUG=+eventlog")
			boot.Stdout, boot.Stderr = events, events // files, not pipes: the prefix's processes keep them
		}
		require.NoError(t, boot.Run(), "wineboot %v", args)
	}
	endWineserver := func() {
		kill := exec.Command("wineserver", "-k")
		kill.Env = w.env
		_ = kill.Run()
		wait := exec.CommandContext(context.Background(), "wineserver", "-w")
		wait.Env = w.env
		done := make(chan struct{})
		go func() { _ = wait.Run(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Log("wineserver -k: the prefix's processes did not end within 10s")
		}
	}
	require.NoError(t, os.MkdirAll(w.dir, 0o755))
	t.Cleanup(endWineserver)
	wineboot(nil, "-i")
	w.wine(30*time.Second, "winecfg", "-v", "win10")
	dll := filepath.Join(w.dir, "drive_c", "windows", "system32", "bcryptprimitives.dll")
	src := filepath.Join(dir, "processprng.c")
	require.NoError(t, os.WriteFile(src, []byte(wineStandIn), 0o644))
	def := filepath.Join(dir, "bcryptprimitives.def")
	require.NoError(t, os.WriteFile(def, []byte("LIBRARY bcryptprimitives\nEXPORTS\n    ProcessPrng\n"), 0o644))
	out, err := exec.Command("x86_64-w64-mingw32-gcc", "-shared", "-O2", "-o", dll, src, def).CombinedOutput()
	require.NoError(t, err, "the ProcessPrng stand-in: %s", out)
	endWineserver()

	// A wineserver that outlives each command (-p): its service
	// manager and the service live in it, and its processes, the
	// service's among them, write the debug channel (the Event Log's
	// entries) to events. No pipe for wineserver's output: the server
	// it starts would hold it open.
	server := exec.Command("wineserver", "-p")
	server.Env = w.env
	require.NoError(t, server.Run(), "wineserver -p")
	events, err := os.Create(w.events)
	require.NoError(t, err)
	defer events.Close()
	wineboot(events)
	return w
}

// run runs a Windows program in the prefix, at most timeout, and returns
// its output (standard output, then standard error) and exit status.
func (w *winePrefix) run(timeout time.Duration, args ...string) ([]byte, int) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "wine", args...)
	cmd.Env, cmd.Dir = w.env, w.cwd()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if ctx.Err() != nil {
		w.t.Fatalf("wine %s: no answer within %v (%v)\n%s%s", strings.Join(args, " "), timeout, err, stdout.Bytes(), stderr.Bytes())
	}
	// Wine's own complaints (no wine32, no display) are not the program's.
	var errOut []string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if !strings.Contains(l, "wine32") && !strings.Contains(l, "multiarch") && !strings.Contains(l, "dpkg --add-architecture") &&
			!strings.Contains(l, "apt-get install wine32") {
			errOut = append(errOut, l)
		}
	}
	return append(stdout.Bytes(), strings.Join(errOut, "\n")...), code
}

func (w *winePrefix) wine(timeout time.Duration, args ...string) []byte {
	out, code := w.run(timeout, args...)
	require.Equal(w.t, 0, code, "wine %s: %s", strings.Join(args, " "), out)
	return out
}

// async runs a Windows program at most 60 s; its output arrives on the
// channel when it has ended.
func (w *winePrefix) async(args ...string) <-chan []byte {
	done := make(chan []byte, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "wine", args...)
		cmd.Env, cmd.Dir = w.env, w.cwd()
		cmd.WaitDelay = 2 * time.Second
		out, err := cmd.CombinedOutput()
		if err != nil {
			out = append(out, fmt.Sprintf("\n(%v)", err)...)
		}
		done <- out
	}()
	return done
}

// background runs a Windows program until the returned function kills it.
func (w *winePrefix) background(args ...string) (kill func()) {
	cmd := exec.Command("wine", args...)
	cmd.Env, cmd.Dir = w.env, w.cwd()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 2 * time.Second
	require.NoError(w.t, cmd.Start())
	var once sync.Once
	kill = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			w.t.Logf("wine %s (killed):\n%s", strings.Join(args, " "), out.Bytes())
		})
	}
	w.t.Cleanup(kill)
	return kill
}

// until polls cond every 300 ms until it holds, at most bound.
func (w *winePrefix) until(bound time.Duration, what string, cond func() bool) {
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			w.t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// cwd is the working directory of the commands: the test's own.
func (w *winePrefix) cwd() string { return filepath.Dir(w.dir) }

func (w *winePrefix) exeArgs(args ...string) []string {
	return append([]string{`C:\slotpoller\slotpoller.exe`}, args...)
}

// ok runs slotpoller.exe with args, which must succeed within 60 s.
func (w *winePrefix) ok(args ...string) []byte {
	start := time.Now()
	out := w.wine(60*time.Second, w.exeArgs(args...)...)
	w.t.Logf("slotpoller %s (%v):\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out)
	return out
}

// eventLog is what the service wrote to the Event Log so far.
func (w *winePrefix) eventLog() string {
	b, err := os.ReadFile(w.events)
	require.NoError(w.t, err)
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		// Information as trace, warnings as warn, errors as err.
		if _, msg, ok := strings.Cut(l, ":eventlog:ReportEventW "); ok {
			// L"...", escaped as C
			msg = strings.TrimSuffix(strings.TrimPrefix(msg, `L"`), `"`)
			lines = append(lines, strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(msg))
		}
	}
	return strings.Join(lines, "\n")
}

func (w *winePrefix) jobState(cfg, endpoint string) string {
	var list struct {
		Jobs []struct {
			Endpoint string `json:"endpoint"`
			State    string `json:"state"`
		} `json:"jobs"`
	}
	out := w.wine(30*time.Second, w.exeArgs("job", "list", "-config", cfg, "-json", "-endpoint", endpoint)...)
	start := bytes.IndexByte(out, '{')
	require.GreaterOrEqual(w.t, start, 0, "job list -json: %s", out)
	require.NoError(w.t, json.NewDecoder(bytes.NewReader(out[start:])).Decode(&list), "%s", out)
	require.Len(w.t, list.Jobs, 1, "%s", out)
	return list.Jobs[0].State
}

// wineEndpoints are the service's job endpoints: /job and /task answer at
// once, /slow after 6 s; each records its calls.
type wineEndpoints struct {
	url   string
	mu    sync.Mutex
	calls map[string]int
	ended map[string]bool
}

func newWineEndpoints(t *testing.T) *wineEndpoints {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	e := &wineEndpoints{url: "http://" + ln.Addr().String(), calls: map[string]int{}, ended: map[string]bool{}}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Slotpoller-Node") != "wine01" {
			http.Error(rw, "not from wine01", http.StatusBadRequest)
			return
		}
		e.mu.Lock()
		e.calls[r.URL.Path]++
		e.mu.Unlock()
		if r.URL.Path == "/slow" {
			select {
			case <-time.After(6 * time.Second):
			case <-r.Context().Done():
				return
			}
		}
		e.mu.Lock()
		e.ended[r.URL.Path] = true
		e.mu.Unlock()
		fmt.Fprintln(rw, "ok")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return e
}

func (e *wineEndpoints) await(t *testing.T, path string, bound time.Duration) {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) {
		e.mu.Lock()
		n := e.calls[path]
		e.mu.Unlock()
		if n > 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the service did not call %s within %v", path, bound)
}

func (e *wineEndpoints) finished(path string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ended[path]
}
