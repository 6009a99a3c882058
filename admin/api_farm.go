package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/turns"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/rotation"
	"github.com/slotpoller/slotpoller/service"
)

// The dashboard's reads (GET /api/v1/farm and /api/v1/throughput) and the
// actions on schedules and tasks, under /api/v1/ beside the job routes
// (api.go); routes.go has their paths. The two reads are answered from a copy shared by every viewer of this
// node, refreshed at most once per farmEvery and throughputEvery: the
// database work of a node's dashboards does not grow with their number,
// and a refresh is one statement or two whatever the farm's size.
const (
	farmEvery       = time.Second
	throughputEvery = 10 * time.Second
	// throughputWindow is what the charts cover.
	throughputWindow = time.Hour
	// throughputCap bounds the rows one throughput read counts.
	throughputCap = 50_000
	// stripSlots is the length of the rotation strip.
	stripSlots = 60
	// nextOwners is how many upcoming slots the farm view names.
	nextOwners = 6
)

// shared is a value computed at most once per every, whoever asks.
type shared[T any] struct {
	clk   clock.Clock
	every time.Duration

	mu   sync.Mutex
	read bool          // a read has succeeded
	at   time.Duration // the clock's monotonic reading after it
	val  T
}

// get returns the copy, or reads a new one when it is older than every.
// Viewers asking at once wait for one read instead of each sending theirs.
func (c *shared[T]) get(read func() (T, error)) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.read && c.clk.Monotonic()-c.at < c.every {
		return c.val, nil
	}
	v, err := read()
	if err != nil {
		return v, err
	}
	c.val, c.at, c.read = v, c.clk.Monotonic(), true
	return v, nil
}

// FarmNode is one node as the farm view shows it: the fields of
// `slotpoller status` (nodeView), and more.
type FarmNode struct {
	nodeView
	LastSeenAgoMS float64 `json:"last_seen_ago_ms"` // by the database clock
	Tasks         int     `json:"tasks"`            // endless tasks it holds
	Backlog       bool    `json:"backlog"`          // it left due work behind lately
	Turns         []int64 `json:"turns"`            // slots it polled, within the strip
}

// SlotOwner is a slot and the live node it belongs to.
type SlotOwner struct {
	Slot  int64  `json:"slot"`
	Owner string `json:"owner"`
}

// StripSlot is one slot of the rotation strip: the nodes that polled in
// it. Pending: a node's heartbeat since that slot has not been read yet,
// so an empty slot is not (yet) a gap.
type StripSlot struct {
	Slot    int64    `json:"slot"`
	Owner   string   `json:"owner"` // by today's live nodes
	Pollers []string `json:"pollers"`
	Pending bool     `json:"pending,omitempty"`
	// Before: no live node had started yet (a farm just started): an
	// empty slot there is no gap.
	Before bool `json:"before,omitempty"`
}

// FarmView is GET /api/v1/farm.
type FarmView struct {
	Node         string         `json:"node"` // the node answering
	Driver       string         `json:"driver"`
	DSN          string         `json:"dsn"` // masked
	DatabaseTime apiTime        `json:"database_time"`
	SlotMS       int64          `json:"slot_ms"`
	Slot         int64          `json:"slot"`
	Owner        string         `json:"owner"`
	Next         []SlotOwner    `json:"next"`
	Backlog      bool           `json:"backlog"` // the rotation is widened
	Live         int            `json:"live"`
	Capacity     int            `json:"capacity"`
	Free         int            `json:"free"`
	Nodes        []FarmNode     `json:"nodes"`
	Strip        []StripSlot    `json:"strip"`
	Jobs         map[string]int `json:"jobs"`
	JobsCountCap int            `json:"jobs_count_cap"`
}

// ThroughputView is GET /api/v1/throughput: 60 minutes, oldest first.
type ThroughputView struct {
	Minutes []ThroughputPoint `json:"minutes"`
	Rows    int               `json:"rows"`
	Capped  bool              `json:"capped"` // more than Cap jobs finished: the oldest minutes are short
	Cap     int               `json:"cap"`
}

// ThroughputPoint is one minute of the charts.
type ThroughputPoint struct {
	Ago        int     `json:"ago"` // minutes before now; 0 is the last minute
	Done       int     `json:"done"`
	Failed     int     `json:"failed"` // failed and dead
	AvgDelayMS float64 `json:"avg_delay_ms"`
	MaxDelayMS int64   `json:"max_delay_ms"`
}

// farmRead is GET /api/v1/farm: the shared copy.
func (a *api) farmRead(ctx context.Context, _ *client.Client, r *http.Request) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	v, err := a.farmCopy.get(func() (FarmView, error) { return a.farm(ctx) })
	return http.StatusOK, v, err
}

// throughputRead is GET /api/v1/throughput: the shared copy.
func (a *api) throughputRead(ctx context.Context, _ *client.Client, r *http.Request) (int, any, error) {
	if _, err := query(r); err != nil {
		return 0, nil, err
	}
	v, err := a.throughputCopy.get(func() (ThroughputView, error) { return a.throughput(ctx) })
	return http.StatusOK, v, err
}

// The actions of nameAction: each the function the CLI's verb calls.

func pauseSchedule(ctx context.Context, s *store.Store, name string) (any, error) {
	return map[string]any{"name": name, "enabled": false}, jobs.PauseSchedule(ctx, s, name)
}

func resumeSchedule(ctx context.Context, s *store.Store, name string) (any, error) {
	return map[string]any{"name": name, "enabled": true}, jobs.ResumeSchedule(ctx, s, name)
}

func triggerSchedule(ctx context.Context, s *store.Store, name string) (any, error) {
	id, err := jobs.TriggerSchedule(ctx, s, name)
	return map[string]any{"name": name, "id": id}, err
}

func deleteTask(ctx context.Context, s *store.Store, name string) (any, error) {
	state, err := s.TaskRequestDelete(ctx, name)
	return map[string]any{"name": name, "state": state}, err
}

func (a *api) scheduleAction(done string, do func(context.Context, *store.Store, string) (any, error)) apiFunc {
	return a.nameAction("schedule", done, do)
}

// nameAction is an action on the schedule or task named in the path,
// whose body is empty or {}: the same function the CLI's verb calls.
func (a *api) nameAction(kind, done string, do func(context.Context, *store.Store, string) (any, error)) apiFunc {
	return func(ctx context.Context, _ *client.Client, r *http.Request) (int, any, error) {
		name := r.PathValue("name")
		if err := jobs.ValidateName(kind, name); err != nil {
			return 0, nil, &client.FieldError{Field: "name", Problem: err.Error()}
		}
		if _, err := query(r); err != nil {
			return 0, nil, err
		}
		if err := decodeBody(r, &struct{}{}, true); err != nil {
			return 0, nil, err
		}
		body, err := do(ctx, a.n.Store(), name)
		if errors.Is(err, store.ErrNotFound) {
			return 0, nil, &apiError{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("no %s named %q", kind, name)}
		}
		if err != nil {
			return 0, nil, err
		}
		a.log.Info(kind+" "+done+" through the API", kind, name)
		return http.StatusOK, body, nil
	}
}

// farm reads the registry and the job counts: two statements.
func (a *api) farm(ctx context.Context) (FarmView, error) {
	s := a.n.Store()
	cfg := a.n.cfg
	slot := time.Duration(cfg.Rotation.Slot)
	nodes, dbNow, err := s.Nodes(ctx, time.Duration(cfg.Checkin.TTL))
	if err != nil {
		return FarmView{}, err
	}
	tally, err := s.JobCountsCapped(ctx, service.JobCountCap)
	if err != nil {
		return FarmView{}, err
	}
	v := FarmView{Node: cfg.Node.Name, Driver: cfg.Database.Driver, DSN: config.MaskDSN(cfg.Database.DSN),
		DatabaseTime: apiTime(dbNow), SlotMS: slot.Milliseconds(), Nodes: []FarmNode{},
		Jobs: tally.Counts, JobsCountCap: tally.Cap}
	k := rotation.Slot(dbNow, slot)
	first := k - stripSlots + 1
	var live []string
	pendingFrom, startedFrom := k+1, k+1
	pollers := map[int64][]string{}
	for _, n := range nodes {
		fn := FarmNode{nodeView: nodeView{Name: n.Name, Live: n.Live, State: n.State, Incarnation: n.Incarnation,
			Capacity: n.Capacity, Free: n.Free, OffsetMS: ms(n.Offset), OffsetErrorMS: ms(n.OffsetError),
			LastSeen: apiTime(n.LastSeen), Started: apiTime(n.Started)},
			LastSeenAgoMS: ms(dbNow.Sub(n.LastSeen)), Tasks: n.Tasks, Backlog: n.Backlog, Turns: []int64{}}
		for _, t := range turns.Decode(n.Turns) {
			if t >= first && t <= k {
				fn.Turns = append(fn.Turns, t)
				pollers[t] = append(pollers[t], n.Name)
			}
		}
		if n.Live {
			live = append(live, n.Name) // Nodes sorts by name: the rotation's order
			v.Capacity += n.Capacity
			v.Free += n.Free
			v.Backlog = v.Backlog || n.Backlog
			// What this node polled since its last heartbeat is not on its
			// row yet.
			pendingFrom = min(pendingFrom, rotation.Slot(n.LastSeen, slot))
			startedFrom = min(startedFrom, rotation.Slot(n.Started, slot))
		}
		v.Nodes = append(v.Nodes, fn)
	}
	v.Live = len(live)
	v.Slot, v.Owner = k, rotation.Owner(k, live)
	if len(live) > 0 {
		for i := int64(1); i <= nextOwners; i++ {
			v.Next = append(v.Next, SlotOwner{Slot: k + i, Owner: rotation.Owner(k+i, live)})
		}
	}
	for sl := first; sl <= k; sl++ {
		p := pollers[sl]
		if p == nil {
			p = []string{}
		}
		v.Strip = append(v.Strip, StripSlot{Slot: sl, Owner: rotation.Owner(sl, live), Pollers: p,
			Pending: sl >= pendingFrom && len(p) == 0, Before: sl <= startedFrom && len(p) == 0})
	}
	return v, nil
}

// throughput reads the last hour's finished jobs per minute: one capped
// statement.
func (a *api) throughput(ctx context.Context) (ThroughputView, error) {
	t, err := a.n.Store().JobThroughput(ctx, throughputWindow, throughputCap)
	if err != nil {
		return ThroughputView{}, err
	}
	minutes := int(throughputWindow / time.Minute)
	v := ThroughputView{Minutes: make([]ThroughputPoint, minutes), Rows: t.Rows, Capped: t.Capped, Cap: throughputCap}
	for i := range v.Minutes {
		v.Minutes[i].Ago = minutes - 1 - i
	}
	for _, m := range t.Minutes {
		if m.Ago >= minutes {
			continue
		}
		p := &v.Minutes[minutes-1-m.Ago]
		p.Done, p.Failed, p.MaxDelayMS = m.Done, m.Failed, m.DelayMaxMS
		if n := m.Done + m.Failed; n > 0 {
			p.AvgDelayMS = float64(m.DelaySumMS) / float64(n)
		}
	}
	return v, nil
}

// ms is d in milliseconds, to the microsecond, as status writes them.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
