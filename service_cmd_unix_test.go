//go:build !windows

package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/service"
	"github.com/stretchr/testify/require"
)

// runService is what `slotpoller run` does under systemd. These tests run
// it in-process (kardianos/service's Run is the same on every Unix
// manager): a node that gives up makes it return the node's error, so the
// process exits and systemd restarts it; SIGTERM drains the node, which
// leaves the registry, within the stop bound.

func serviceTestConfig(t *testing.T, dsn string) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Database.DSN = dsn
	cfg.Node = config.NodeConfig{Name: "svc-main", Capacity: 2}
	cfg.Jobs.DrainTimeout = config.Duration(time.Second)
	cfg.Rotation.Slot = config.Duration(100 * time.Millisecond)
	cfg.Checkin.Heartbeat = config.Duration(100 * time.Millisecond)
	cfg.Checkin.TTL = config.Duration(time.Second)
	require.NoError(t, cfg.Validate())
	return cfg
}

func TestRunServiceReturnsTheErrorOfANodeThatGaveUp(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "farm.db")
	path := writeConfig(t, "database:\n  dsn: "+dsn+"\n")
	code, _, errOut := cli(t, "schema", "migrate", "-config", path)
	require.Equal(t, 0, code, errOut)
	s, err := open.Store(context.Background(), "sqlite", dsn)
	require.NoError(t, err)
	_, err = s.DB().Exec(`INSERT INTO slotpoller_schema_version (version, description, applied_at) VALUES (42, 'future', 0)`)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	done := make(chan error, 1)
	go func() { done <- runService(serviceTestConfig(t, dsn), io.Discard) }()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "newer")
	case <-time.After(60 * time.Second):
		t.Fatal("runService did not return after the node gave up")
	}
}

func TestRunServiceStopsOnSIGTERM(t *testing.T) {
	// Keep SIGTERM from ending the test binary whatever happens.
	guard := make(chan os.Signal, 1)
	signal.Notify(guard, syscall.SIGTERM)
	defer signal.Stop(guard)

	dsn := filepath.Join(t.TempDir(), "farm.db")
	cfg := serviceTestConfig(t, dsn)
	done := make(chan error, 1)
	go func() { done <- runService(cfg, io.Discard) }()

	s, err := open.Store(context.Background(), "sqlite", dsn)
	require.NoError(t, err)
	defer s.Close()
	state := func() string {
		nodes, _, err := s.Nodes(context.Background(), time.Second)
		if err != nil {
			return ""
		}
		for _, n := range nodes {
			if n.Name == "svc-main" {
				return n.State
			}
		}
		return ""
	}
	require.Eventually(t, func() bool { return state() == "up" }, 30*time.Second, 20*time.Millisecond)

	begin := time.Now()
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case err := <-done:
		require.NoError(t, err)
		require.Less(t, time.Since(begin), service.StopTimeout(cfg))
	case <-time.After(60 * time.Second):
		t.Fatal("runService did not stop on SIGTERM")
	}
	require.Equal(t, "left", state())
}
