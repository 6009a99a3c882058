package service

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/checkin"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fastNodeConfig is a valid config of a node on a SQLite file whose slots,
// heartbeats and TTL are short enough for a test.
func fastNodeConfig(t *testing.T, dsn, name string, capacity int) config.Config {
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

func liveIncarnation(s *store.Store, name string) string {
	nodes, _, err := s.Nodes(context.Background(), time.Second)
	if err != nil {
		return "" // not migrated yet
	}
	for _, n := range nodes {
		if n.Name == name && n.Live {
			return n.Incarnation
		}
	}
	return ""
}

// A second node started under a live node's name gives up with an error
// that names the problem, and the first keeps its name.
func TestSecondNodeUnderALiveNodesNameRefusesToStart(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "farm.db")
	cfg := fastNodeConfig(t, dsn, "twin", 1)
	logs := &programLog{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	first := make(chan error, 1)
	go func() { first <- NewNode(cfg, NewLogger(logs, config.LogConfig{Level: "info"}), nil).Run(ctx) }()
	defer func() {
		if t.Failed() {
			t.Logf("node log:\n%s", logs.String())
		}
	}()
	s, err := open.Store(context.Background(), "sqlite", dsn)
	require.NoError(t, err)
	defer s.Close()
	require.Eventually(t, func() bool { return liveIncarnation(s, "twin") != "" }, 30*time.Second, 20*time.Millisecond)
	holder := liveIncarnation(s, "twin")

	secondCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = NewNode(cfg, NewLogger(logs, config.LogConfig{Level: "info"}), nil).Run(secondCtx)
	require.ErrorIs(t, err, checkin.ErrNameInUse)
	require.ErrorContains(t, err, "node.name")
	require.NoError(t, secondCtx.Err(), "it gave up by itself, within about the TTL")
	require.Equal(t, holder, liveIncarnation(s, "twin"), "the first node keeps its name")

	stop()
	require.NoError(t, <-first)
}

// A node restarted after a crash finds its old row still live; it waits
// for the old heartbeat to pass the TTL and starts.
func TestNodeRestartedAfterACrashStartsAfterTheTTL(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "farm.db")
	cfg := fastNodeConfig(t, dsn, "twin", 1)
	logs := &programLog{}
	defer func() {
		if t.Failed() {
			t.Logf("node log:\n%s", logs.String())
		}
	}()
	// The crashed incarnation: checked in, then never heard from again.
	crashed := func() {
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- NewNode(cfg, NewLogger(logs, config.LogConfig{Level: "info"}), nil).Run(ctx) }()
		s, err := open.Store(context.Background(), "sqlite", dsn)
		require.NoError(t, err)
		defer s.Close()
		require.Eventually(t, func() bool { return liveIncarnation(s, "twin") != "" }, 30*time.Second, 20*time.Millisecond)
		// kill -9: no leave. Put the row back as live as the crash left it.
		inc := liveIncarnation(s, "twin")
		stop()
		require.NoError(t, <-done)
		_, err = s.DB().ExecContext(context.Background(), store.Expand(s.Dialect(),
			`UPDATE {nodes} SET state = 'up', incarnation = ?, last_seen = {now} WHERE name = ?`), inc, "twin")
		require.NoError(t, err)
	}
	crashed()

	logs = &programLog{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	begin := time.Now()
	done := make(chan error, 1)
	go func() { done <- NewNode(cfg, NewLogger(logs, config.LogConfig{Level: "info"}), nil).Run(ctx) }()
	s, err := open.Store(context.Background(), "sqlite", dsn)
	require.NoError(t, err)
	defer s.Close()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "checked in") }, 30*time.Second, 20*time.Millisecond)
	require.Less(t, time.Since(begin), 10*time.Second)
	require.Contains(t, logs.String(), "node name is held by another process")
	stop()
	require.NoError(t, <-done)
}

// How long a node keeps to its share of a burst before it claims as fast
// as its calls end (jobs.Options.BacklogSpread). It must cover the time
// for every node to hear of the backlog and take its turn, or an early
// node drains a burst before a late one polled; and it should be no
// longer, because the shares the nodes count miss the jobs done between
// their turns, and the last jobs of a burst wait for the spread (a 2,000
// job burst on PostgreSQL ran 0.3 s and then waited a second for its last
// four jobs, in one round in five).
func TestBacklogSpreadIsAsLongAsHearingTakes(t *testing.T) {
	for _, c := range []struct {
		name            string
		slot, heartbeat time.Duration
	}{
		{"defaults", time.Second, time.Second},
		{"slot longer than the heartbeat", 10 * time.Second, time.Second},
		{"short slot", 250 * time.Millisecond, time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Rotation.Slot, cfg.Checkin.Heartbeat = config.Duration(c.slot), config.Duration(c.heartbeat)
			// A note reaches every node at once; each takes its turn then.
			notes := backlogSpread(cfg, true)
			require.Positive(t, notes)
			require.LessOrEqual(t, notes, c.slot/4, "nodes that hear notes wait longer than hearing takes")
			// Without notes a node hears at its turn of the widened slot,
			// within a slot, or at its next registry read.
			require.GreaterOrEqual(t, backlogSpread(cfg, false), max(c.slot, c.heartbeat),
				"nodes that hear only at their turns would lose their share")
		})
	}
	// The wiring asks the store whether its nodes hear notes or wakes.
	storetest.Each(t, func(t *testing.T, driver string) {
		s, _ := storetest.Open(t, driver)
		require.Equal(t, driver == "postgres", s.HearsNotes())
		require.Equal(t, driver == "postgres" || driver == "mysql", s.HearsWakes())
	})
}

// A node that stops closes its connections to the endpoints: in a process
// that goes on (a program that embeds the node, the bench, a test), they
// and their goroutines stayed open for the transport's idle timeout, 90 s,
// up to the node's capacity of them, and the application's server kept as
// many idle connections.
func TestAStoppedNodeClosesItsConnectionsToTheEndpoints(t *testing.T) {
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	endpoint := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	endpoint.Config.ConnState = func(c net.Conn, st http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		switch st {
		case http.StateNew:
			open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(open, c)
		}
	}
	endpoint.Start()
	t.Cleanup(endpoint.Close)
	openConns := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(open)
	}

	s, db := storetest.OpenDB(t, "sqlite")
	cfg := testConfig(t, db, "closer", endpoint.URL)
	rn := runNode(t, cfg)
	for range 8 {
		_, err := jobs.Enqueue(context.Background(), s, store.NewJob{Endpoint: "/jobs/x", MaxAttempts: 1})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		counts, err := s.JobCounts(context.Background())
		return err == nil && counts[store.StateDone] == 8
	}, 30*time.Second, 20*time.Millisecond, "the node should run the jobs")
	require.Positive(t, openConns(), "the calls' connections stay open between calls")

	rn.stop(t)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Zero(c, openConns(), "connections to the endpoint the stopped node left open")
	}, 5*time.Second, 10*time.Millisecond)
}

func TestStopTimeoutIsTheDrainPlusAMargin(t *testing.T) {
	cfg := config.Default()
	// Node.Run's stop: leave (5s) + task release (ttl + 5s) + drain (20s)
	// + job release (5s) + admin endpoint (2s).
	require.Equal(t, 40*time.Second, StopTimeout(cfg), "drain 20s + ttl 3s + 17s")
	cfg.Jobs.DrainTimeout = 0
	require.Equal(t, 20*time.Second, StopTimeout(cfg))
}

// programLog collects a node's log lines, written from its goroutines.
type programLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *programLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *programLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
