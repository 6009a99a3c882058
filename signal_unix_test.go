//go:build !windows

package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/nodetest"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/stretchr/testify/require"
)

// helperArgsEnv makes the test binary a slotpoller process: its value is
// the command line, one argument a line.
const helperArgsEnv = "SLOTPOLLER_TEST_MAIN_ARGS"

// TestHelperProcess is `slotpoller` for the process tests, which start the
// test binary again with helperArgsEnv set.
func TestHelperProcess(t *testing.T) {
	args := os.Getenv(helperArgsEnv)
	if args == "" {
		t.Skip("the slotpoller process of the process tests")
	}
	os.Exit(run(strings.Split(args, "\n"), os.Stdout, os.Stderr))
}

// startSlotpoller starts `slotpoller args...` as a process of its own.
func startSlotpoller(t *testing.T, args ...string) (*exec.Cmd, *nodetest.Log, <-chan error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), helperArgsEnv+"="+strings.Join(args, "\n"))
	stderr := &nodetest.Log{}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	exited := make(chan struct{})
	go func() { done <- cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return cmd, stderr, done
}

// A node in the foreground whose terminal closes (SIGHUP) stops as on
// Ctrl-C: it leaves the registry and drains. A second Ctrl-C cuts the
// drain short: the call in flight is cancelled, its job given back unrun,
// and the process exits.
func TestForegroundRunStopsGracefullyOnSIGHUPAndAtOnceOnASecondSignal(t *testing.T) {
	called := make(chan struct{}, 1)
	cancelled := make(chan struct{}, 1)
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case called <- struct{}{}:
		default:
		}
		<-r.Context().Done() // a call that runs until it is cancelled
		select {
		case cancelled <- struct{}{}:
		default:
		}
	}))
	defer endpoint.Close()

	dsn := filepath.Join(t.TempDir(), "farm.db")
	path := writeConfig(t, "database:\n  dsn: "+dsn+"\nnode:\n  name: fg-node\n  capacity: 2\n"+
		"jobs:\n  base_url: "+endpoint.URL+"\n  drain_timeout: 5m\n  timeout: 10m\n"+
		"rotation:\n  slot: 100ms\ncheckin:\n  heartbeat: 100ms\n  ttl: 1s\n")
	code, _, errOut := cli(t, "schema", "migrate", "-config", path)
	require.Equal(t, 0, code, errOut)
	code, out, errOut := cli(t, "enqueue", "-config", path, "-endpoint", "/hang")
	require.Equal(t, 0, code, errOut)
	id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	require.NoError(t, err)

	s, err := open.Store(context.Background(), "sqlite", dsn)
	require.NoError(t, err)
	defer s.Close()
	nodeState := func() string {
		nodes, _, err := s.Nodes(context.Background(), time.Second)
		if err != nil {
			return ""
		}
		for _, n := range nodes {
			if n.Name == "fg-node" {
				return n.State
			}
		}
		return ""
	}

	cmd, stderr, done := startSlotpoller(t, "run", "-config", path)
	select {
	case <-called:
	case err := <-done:
		t.Fatalf("slotpoller exited (%v) before calling the job:\n%s", err, stderr)
	case <-time.After(60 * time.Second):
		t.Fatalf("the job was not called:\n%s", stderr)
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return nodeState() == "left" }, 30*time.Second, 20*time.Millisecond,
		"the node leaves the registry on SIGHUP:\n%s", stderr)
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "second") }, 10*time.Second, 20*time.Millisecond,
		"the log says a second signal stops at once:\n%s", stderr)
	select {
	case err := <-done:
		t.Fatalf("slotpoller exited (%v) instead of draining:\n%s", err, stderr)
	case <-time.After(300 * time.Millisecond):
	}

	begin := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("slotpoller exited with %v:\n%s", err, stderr)
		}
		require.NoError(t, err, stderr.String())
		require.Less(t, time.Since(begin), 15*time.Second)
	case <-time.After(30 * time.Second):
		t.Fatalf("a second signal did not stop slotpoller:\n%s", stderr)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the call in flight was not cancelled")
	}
	j, err := s.JobGet(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, store.StateReady, j.State, "the job is given back unrun:\n%s", stderr)
	require.Equal(t, "left", nodeState())
}
