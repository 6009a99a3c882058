package service

// The farm as `slotpoller status`, `task list` and `schedule list` show
// it, and the admin endpoint's /status and HTTP API serve it: one read
// model for both. Writing it for a person is the CLI's (status_report.go
// in the main package); the admin API writes it as JSON.

import (
	"context"
	"fmt"
	"time"

	"github.com/slotpoller/slotpoller/config"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/slotpoller/slotpoller/schema"
)

// NodeStatus is one node as `slotpoller status` shows it.
type NodeStatus struct {
	Name          string    `json:"name"`
	Live          bool      `json:"live"`
	State         string    `json:"state"`
	Incarnation   string    `json:"incarnation"`
	Capacity      int       `json:"capacity"`
	Free          int       `json:"free"`
	OffsetMS      float64   `json:"offset_ms"`       // database clock minus the node's clock, as last measured
	OffsetErrorMS float64   `json:"offset_error_ms"` // the measurement's error bound
	LastSeen      time.Time `json:"last_seen"`       // database time of the node's last registry write (heartbeat or turn)
	Started       time.Time `json:"started"`
}

// StatusReport is the farm as the database sees it.
type StatusReport struct {
	DatabaseTime  time.Time    `json:"database_time"`
	SchemaVersion int          `json:"schema_version"`
	Nodes         []NodeStatus `json:"nodes"`
	// Jobs counts the jobs of each state, and retrying: the ready jobs
	// backing off after a failed attempt (counted in ready too). Each count
	// stops at JobsCountCap, which then means "at least".
	Jobs         map[string]int `json:"jobs"`
	JobsCountCap int            `json:"jobs_count_cap"`
	// PausedQueues are the queues whose jobs no node starts until resumed.
	PausedQueues []PausedQueue `json:"paused_queues"`
	// ManagedQueues are the queues with a priority, limits or a rate from
	// the nodes' config.
	ManagedQueues []ManagedQueue `json:"managed_queues"`
}

// ManagedQueue is a queue's settings, 0 where none is set, and the starts
// counted in its current rate window (of the database clock).
type ManagedQueue struct {
	Name         string `json:"name"`
	Priority     int    `json:"priority"`
	Limit        int    `json:"limit,omitempty"`
	NodeLimit    int    `json:"node_limit,omitempty"`
	Rate         int    `json:"rate,omitempty"`
	RatePeriodMS int64  `json:"rate_period_ms,omitempty"`
	RateUsed     int    `json:"rate_used,omitempty"`
	// Running and Waiting (ready and due) count at most JobCountCap.
	Running int `json:"running"`
	Waiting int `json:"waiting"`
	// StartDelayP50MS and P99 are of the jobs that started within the
	// last StartDelayWindow (finished since, or running); 0 when none.
	StartDelayJobs  int     `json:"start_delay_jobs"`
	StartDelayP50MS float64 `json:"start_delay_p50_ms"`
	StartDelayP99MS float64 `json:"start_delay_p99_ms"`
}

// StartDelayWindow is how far back status reads start delays.
const StartDelayWindow = 5 * time.Minute

// PausedQueue is a paused queue: who paused it and when (database time).
type PausedQueue struct {
	Name     string     `json:"name"`
	PausedBy string     `json:"paused_by,omitempty"`
	PausedAt *time.Time `json:"paused_at,omitempty"`
}

// Status reads the farm's state: nodes with liveness judged by the
// database clock against ttl, and job counts by state, each capped at
// JobCountCap so that the read costs the same on a table of any size.
func Status(ctx context.Context, s *store.Store, ttl time.Duration) (StatusReport, error) {
	rep := StatusReport{Nodes: []NodeStatus{}, PausedQueues: []PausedQueue{}, ManagedQueues: []ManagedQueue{}}
	cur, _, err := schema.Status(ctx, s)
	if err != nil {
		return rep, err
	}
	rep.SchemaVersion = cur
	if rep.DatabaseTime, err = s.Now(ctx); err != nil {
		return rep, err
	}
	if cur == 0 {
		return rep, fmt.Errorf("the database has no slotpoller schema yet: run `slotpoller schema migrate` or start a node")
	}
	nodes, _, err := s.Nodes(ctx, ttl)
	if err != nil {
		return rep, err
	}
	for _, n := range nodes {
		rep.Nodes = append(rep.Nodes, NodeStatus{Name: n.Name, Live: n.Live, State: n.State, Incarnation: n.Incarnation,
			Capacity: n.Capacity, Free: n.Free, OffsetMS: ms(n.Offset), OffsetErrorMS: ms(n.OffsetError),
			LastSeen: n.LastSeen, Started: n.Started})
	}
	tally, err := s.JobCountsCapped(ctx, JobCountCap)
	if err != nil {
		return rep, err
	}
	rep.Jobs, rep.JobsCountCap = tally.Counts, tally.Cap
	held, err := s.QueuesHeld(ctx)
	if err != nil {
		return rep, err
	}
	var delays map[string]store.StartDelays
	for _, q := range held {
		if q.Paused {
			rep.PausedQueues = append(rep.PausedQueues, PausedQueue{Name: q.Name, PausedBy: q.PausedBy, PausedAt: q.PausedAt})
		}
		if q.Priority != 0 || q.Limited() {
			if delays == nil {
				// One bounded read for every queue (see QueueStartDelays).
				if delays, err = s.QueueStartDelays(ctx, StartDelayWindow, 1000); err != nil {
					return rep, err
				}
			}
			m := ManagedQueue{Name: q.Name, Priority: q.Priority, Limit: q.Limit,
				NodeLimit: q.NodeLimit, Rate: q.Rate, RatePeriodMS: q.RatePeriod.Milliseconds(), RateUsed: q.RateUsed}
			if m.Running, m.Waiting, err = s.QueueWork(ctx, q.Name, JobCountCap); err != nil {
				return rep, err
			}
			d := delays[q.Name]
			m.StartDelayJobs, m.StartDelayP50MS, m.StartDelayP99MS = d.Jobs, ms(d.P50), ms(d.P99)
			rep.ManagedQueues = append(rep.ManagedQueues, m)
		}
	}
	return rep, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// TaskStatus is one task as `slotpoller task list` shows it.
type TaskStatus struct {
	Name       string     `json:"name"`
	Endpoint   string     `json:"endpoint"`
	Every      string     `json:"every"`
	State      string     `json:"state"`
	Owner      string     `json:"owner,omitempty"` // node name while held
	Since      *time.Time `json:"since,omitempty"` // database time the owner took it
	Token      int64      `json:"token"`
	Calls      int64      `json:"calls"`
	Failures   int        `json:"failures"` // consecutive failed calls
	LastCallAt *time.Time `json:"last_call_at,omitempty"`
	LastStatus int        `json:"last_status,omitempty"`
	LastError  string     `json:"last_error,omitempty"`
}

// TaskReport turns task rows into what the CLI shows.
func TaskReport(tasks []store.Task) []TaskStatus {
	out := make([]TaskStatus, 0, len(tasks))
	for _, t := range tasks {
		ts := TaskStatus{Name: t.Name, Endpoint: t.Endpoint, Every: t.Every.String(), State: t.State, Token: t.Token,
			Calls: t.Calls, Failures: t.Failures, LastCallAt: t.LastCallAt, LastStatus: t.LastStatus, LastError: t.LastError}
		if t.Held {
			ts.Owner, ts.Since = t.OwnerNode, t.Since
		}
		out = append(out, ts)
	}
	return out
}

// ScheduleStatus is one schedule as `slotpoller schedule list` shows it.
type ScheduleStatus struct {
	Name       string     `json:"name"`
	When       string     `json:"when"` // "every 10s" or "cron ... (zone)"
	Endpoint   string     `json:"endpoint"`
	Enabled    bool       `json:"enabled"`
	Source     string     `json:"source"` // config or cli
	NextFireAt *time.Time `json:"next_fire_at,omitempty"`
	LastFireAt *time.Time `json:"last_fire_at,omitempty"`
	LastResult string     `json:"last_result,omitempty"` // state of the latest finished occurrence
	LastStatus int        `json:"last_status,omitempty"`
	LastError  string     `json:"last_error,omitempty"`
	Missed     int64      `json:"missed"` // by the misfire policy, plus occurrences not started within tolerance
	Misfire    string     `json:"misfire"`
	Overlap    string     `json:"overlap"`
	Tolerance  string     `json:"tolerance"`
}

// ScheduleReport reads every schedule with its outcome: three statements,
// whatever the number of schedules.
func ScheduleReport(ctx context.Context, s *store.Store) ([]ScheduleStatus, error) {
	scs, _, err := s.Schedules(ctx)
	if err != nil {
		return nil, err
	}
	outcomes, err := s.ScheduleOutcomes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]ScheduleStatus, 0, len(scs))
	for _, sc := range scs {
		st := ScheduleStatus{Name: sc.Name, Endpoint: sc.Endpoint, Enabled: sc.Enabled, Source: sc.Source,
			NextFireAt: sc.NextFireAt, LastFireAt: sc.LastFireAt, Missed: sc.Missed, Misfire: sc.Misfire, Overlap: sc.Overlap,
			Tolerance: config.Duration(sc.Tolerance).String()}
		if ft, err := jobs.CompileSchedule(sc); err == nil {
			st.When = ft.String()
		} else {
			st.When = "invalid: " + err.Error()
		}
		o := outcomes[sc.Name]
		st.Missed += o.MissedJobs
		st.LastResult, st.LastStatus, st.LastError = o.LastState, o.LastStatus, o.LastError
		out = append(out, st)
	}
	return out, nil
}
