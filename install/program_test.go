package install

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kservice "github.com/kardianos/service"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/nodetest"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/service"
	"github.com/stretchr/testify/require"
)

// The kardianos/service contract: Start does not block, Stop returns
// within a bounded time. Nothing here waits for a fixed time to pass; the
// only deadlines are the bounds under test and generous upper limits.

func TestProgramStartReturnsAtOnceAndStopWaitsForTheNode(t *testing.T) {
	started, cancelled, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	prg := &Program{StopTimeout: time.Minute, Run: func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		close(cancelled)
		<-release // the drain
		return nil
	}}
	// Start must not wait for Run: Run blocks until the test says.
	require.NoError(t, prg.Start(nil))
	<-started
	require.Error(t, prg.Start(nil), "a program runs once")

	stopped := make(chan error, 1)
	go func() { stopped <- prg.Stop(nil) }()
	<-cancelled // Stop cancelled the node's context; now it must wait
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while the node was still draining", err)
	case <-prg.Done():
		t.Fatal("Run returned before its drain")
	default:
	}
	close(release)
	require.NoError(t, <-stopped)
	require.NoError(t, prg.Err(), "a stop asked for is not a failure")
}

func TestProgramStopIsBoundedWhenTheNodeHangs(t *testing.T) {
	hang := make(chan struct{})
	defer close(hang)
	prg := &Program{StopTimeout: 50 * time.Millisecond, Run: func(context.Context) error {
		<-hang // ignores its context
		return nil
	}}
	require.NoError(t, prg.Start(nil))
	begin := time.Now()
	err := prg.Stop(nil)
	require.ErrorContains(t, err, "did not stop within 50ms")
	require.Less(t, time.Since(begin), 10*time.Second, "Stop must return near its bound")
}

func TestProgramStopBeforeStart(t *testing.T) {
	require.NoError(t, (&Program{}).Stop(nil))
	require.Error(t, (&Program{}).Start(nil), "Run must be set")
}

func TestProgramReportsANodeThatGaveUp(t *testing.T) {
	gaveUp := errors.New("schema newer than this binary")
	prg := &Program{StopTimeout: time.Minute, Run: func(context.Context) error { return gaveUp }}
	require.NoError(t, prg.Start(nil))
	<-prg.Done()
	require.ErrorIs(t, prg.Err(), gaveUp)
	require.NoError(t, prg.Stop(nil), "Stop after the node ended returns at once")
	require.ErrorIs(t, prg.Err(), gaveUp)
}

// A real node on SQLite under the Program: Start returns before the node
// has even connected; Stop drains, leaves the registry and returns within
// StopTimeout.
func TestProgramRunsARealNode(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "farm.db")
	cfg := programNodeConfig(t, dsn, "svc-node", 2)

	logs := &nodetest.Log{}
	log := service.NewLogger(logs, config.LogConfig{Level: "debug", Format: "text"})
	prg := &Program{Run: service.NewNode(cfg, log, nil).Run, StopTimeout: service.StopTimeout(cfg), Logger: log}
	require.NoError(t, prg.Start(nil))
	defer func() {
		if t.Failed() {
			t.Logf("node log:\n%s", logs.String())
		}
	}()

	s, err := open.Store(context.Background(), "sqlite", dsn)
	require.NoError(t, err)
	defer s.Close()
	nodeState := func() string {
		nodes, _, err := s.Nodes(context.Background(), time.Second)
		if err != nil {
			return "" // the node has not migrated yet
		}
		for _, n := range nodes {
			if n.Name == "svc-node" {
				return n.State
			}
		}
		return ""
	}
	require.Eventually(t, func() bool { return nodeState() == "up" }, 30*time.Second, 20*time.Millisecond,
		"the node should check in")

	begin := time.Now()
	require.NoError(t, prg.Stop(nil))
	require.Less(t, time.Since(begin), service.StopTimeout(cfg))
	require.NoError(t, prg.Err())
	require.Equal(t, "left", nodeState(), "a stopped node leaves the registry")
	require.Contains(t, logs.String(), "service stopped")
}

// eventLog is a kardianos/service Logger as the Windows Event Log is one.
type eventLog struct{ entries []string }

func (e *eventLog) add(kind string, v ...any) error {
	e.entries = append(e.entries, kind+": "+fmt.Sprint(v...))
	return nil
}
func (e *eventLog) Error(v ...any) error   { return e.add("error", v...) }
func (e *eventLog) Warning(v ...any) error { return e.add("warning", v...) }
func (e *eventLog) Info(v ...any) error    { return e.add("info", v...) }
func (e *eventLog) Errorf(f string, a ...any) error {
	return e.add("error", fmt.Sprintf(f, a...))
}
func (e *eventLog) Warningf(f string, a ...any) error {
	return e.add("warning", fmt.Sprintf(f, a...))
}
func (e *eventLog) Infof(f string, a ...any) error { return e.add("info", fmt.Sprintf(f, a...)) }

var _ kservice.Logger = (*eventLog)(nil)

func TestSystemLoggerWritesEachRecordAtItsLevel(t *testing.T) {
	el := &eventLog{}
	log := NewSystemLogger(el, config.LogConfig{Level: "info", Format: "text"}).With("node", "web-01")
	log.Debug("not shown")
	log.Info("checked in", "live_nodes", 3)
	log.Warn("clock off")
	log.Error("poll failed", "err", io.ErrUnexpectedEOF)
	require.Equal(t, []string{
		"info: level=INFO msg=\"checked in\" node=web-01 live_nodes=3",
		"warning: level=WARN msg=\"clock off\" node=web-01",
		"error: level=ERROR msg=\"poll failed\" node=web-01 err=\"unexpected EOF\"",
	}, el.entries, "one entry per record, no time (the event log stamps it)")

	el = &eventLog{}
	NewSystemLogger(el, config.LogConfig{Level: "debug", Format: "json"}).WithGroup("g").Debug("d", "k", 1)
	require.Len(t, el.entries, 1)
	var rec map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(el.entries[0], "info: ")), &rec))
	require.Equal(t, "d", rec["msg"])
	require.Equal(t, map[string]any{"k": float64(1)}, rec["g"])
	require.NotContains(t, rec, slog.TimeKey)
}

// JSON logs write every duration one way, as a Go duration string: a
// time.Duration as a config Duration is written.
func TestJSONLogsWriteDurationsAsStrings(t *testing.T) {
	var buf bytes.Buffer
	service.NewLogger(&buf, config.LogConfig{Level: "info", Format: "json"}).WithGroup("g").Info("stopping",
		"drain_timeout", config.Duration(20*time.Second), "took", 1500*time.Millisecond, "bound", 5*time.Minute)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec))
	require.Equal(t, map[string]any{"drain_timeout": "20s", "took": "1.5s", "bound": "5m"}, rec["g"])

	el := &eventLog{}
	NewSystemLogger(el, config.LogConfig{Level: "info", Format: "json"}).Info("stopping", "bound", 35*time.Second)
	require.Len(t, el.entries, 1)
	require.Contains(t, el.entries[0], `"bound":"35s"`)
}

// programNodeConfig is a valid config for a node on the SQLite file dsn
// whose turns and stop are quick.
func programNodeConfig(t *testing.T, dsn, name string, capacity int) config.Config {
	cfg := config.Default()
	cfg.Database.DSN = dsn
	cfg.Node = config.NodeConfig{Name: name, Capacity: capacity}
	cfg.Jobs.DrainTimeout = config.Duration(time.Second)
	cfg.Rotation.Slot = config.Duration(100 * time.Millisecond)
	cfg.Checkin.Heartbeat = config.Duration(100 * time.Millisecond)
	cfg.Checkin.TTL = config.Duration(time.Second)
	require.NoError(t, cfg.Validate())
	return cfg
}
