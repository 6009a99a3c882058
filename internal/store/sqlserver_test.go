package store_test

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-sql/civil"
	"github.com/jackc/pgx/v5"
	mssql "github.com/microsoft/go-mssqldb"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/stretchr/testify/require"
)

// The T-SQL every store operation sends, checked without a server: the
// statements are recorded by storetest.Trace (which answers from a script)
// and read. Whether SQL Server accepts and executes them as intended is for
// the conformance suite with SLOTPOLLER_TEST_SQLSERVER_DSN set.

var update = flag.Bool("update", false, "rewrite testdata/sqlserver.sql from the statements sent")

// op is one store operation and the statements it should send.
type op struct {
	name    string
	respond func(storetest.Call) storetest.Reply // nil: Exec affects 1 row, Query returns no rows
	run     func(ctx context.Context, s *store.Store) error
	sends   int // statements
}

func duplicate(number int32) error {
	return mssql.Error{Number: number, Class: 14, Message: "Cannot insert duplicate key"}
}

// answer replies err to the statements that start with prefix and rows
// affected to the other Execs.
func answer(prefix string, err error, affected int64) func(storetest.Call) storetest.Reply {
	return func(c storetest.Call) storetest.Reply {
		if strings.HasPrefix(strings.TrimSpace(c.Query), prefix) {
			return storetest.Reply{Err: err, Affected: affected}
		}
		return storetest.Reply{Affected: 1}
	}
}

// The arguments carry MARK so that a value written into a statement would
// show.
var (
	mNode = store.NodeState{Name: "node-MARK", Incarnation: "inc-MARK", Capacity: 4, Free: 3, Offset: time.Millisecond, OffsetError: time.Microsecond}
	mJob  = store.NewJob{Endpoint: "/jobs/MARK?x='1'", Method: "POST", Payload: []byte("payload MARK"), Delay: 31 * 24 * time.Hour,
		MaxAttempts: 3, Timeout: time.Second, UniqueKey: "unique-MARK", IdempotencyKey: "idem-MARK"}
	mSchedule = store.Schedule{Name: "schedule-MARK", Cron: "0 2 * * *", TimeZone: "Europe/Berlin", Endpoint: "/jobs/MARK",
		Method: "POST", Payload: []byte("MARK"), MaxAttempts: 3, Tolerance: time.Minute, Misfire: store.MisfireOnce,
		Overlap: store.OverlapForbid, Enabled: true, Source: store.SourceCommand}
	mTask = store.NewTask{Name: "task-MARK", Endpoint: "/tasks/MARK", Method: "POST", Payload: []byte("MARK"), Every: time.Second, Timeout: time.Second}
)

func sqlServerOps() []op {
	at := time.Date(2030, 5, 6, 9, 8, 9, 123456700, time.FixedZone("CEST", 2*3600))
	atJob := mJob
	atJob.RunAt, atJob.UniqueKey = &at, ""
	by := at.Add(time.Minute)
	mOccurrence := store.NewJob{Endpoint: "/jobs/MARK", Method: "POST", Payload: []byte("MARK"), RunAt: &at, MaxAttempts: 3,
		UniqueKey: "slotpoller-schedule:schedule-MARK", IdempotencyKey: "slotpoller-schedule:schedule-MARK",
		Schedule: "schedule-MARK", ScheduledFor: &at, StartBy: &by, Exclusive: true}
	return []op{
		{name: "Now", sends: 1, run: func(ctx context.Context, s *store.Store) error { _, err := s.Now(ctx); return err }},
		{name: "NodeCheckIn (row exists)", sends: 1, run: func(ctx context.Context, s *store.Store) error { return s.NodeCheckIn(ctx, mNode, 3*time.Second) }},
		{name: "NodeCheckIn (new node)", sends: 3, respond: answer("UPDATE", nil, 0),
			run: func(ctx context.Context, s *store.Store) error { return s.NodeCheckIn(ctx, mNode, 3*time.Second) }},
		{name: "NodeCheckIn (name held by a live node)", sends: 2, respond: func(c storetest.Call) storetest.Reply {
			if strings.HasPrefix(c.Query, "SELECT") {
				seen := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
				return storetest.Reply{Columns: []string{"incarnation", "last_seen", "now", "live", "live_for"},
					Rows: [][]any{{"inc-other", seen, seen.Add(time.Second), int64(1), int64(0)}}}
			}
			return storetest.Reply{Affected: 0}
		}, run: func(ctx context.Context, s *store.Store) error { return s.NodeCheckIn(ctx, mNode, 3*time.Second) }},
		{name: "NodeHeartbeat", sends: 1, run: func(ctx context.Context, s *store.Store) error { _, err := s.NodeHeartbeat(ctx, mNode); return err }},
		{name: "NodeSignalBacklog", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			return s.NodeSignalBacklog(ctx, mNode.Name, mNode.Incarnation, 5*time.Second)
		}},
		{name: "NodeLeave", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			return s.NodeLeave(ctx, mNode.Name, mNode.Incarnation)
		}},
		{name: "NodeTurn", sends: 2, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.NodeTurn(ctx, mNode, 3*time.Second, 2*time.Second, time.Second)
			return err
		}},
		{name: "Nodes", sends: 1, run: func(ctx context.Context, s *store.Store) error { _, _, err := s.Nodes(ctx, 3*time.Second); return err }},
		{name: "JobInsert (delay)", sends: 1, run: func(ctx context.Context, s *store.Store) error { _, err := s.JobInsert(ctx, mJob); return err }},
		{name: "JobInsert (run at)", sends: 1, run: func(ctx context.Context, s *store.Store) error { _, err := s.JobInsert(ctx, atJob); return err }},
		{name: "JobInsert (unique key taken)", sends: 2, respond: answer("DECLARE", duplicate(2601), 0),
			run: func(ctx context.Context, s *store.Store) error { _, err := s.JobInsert(ctx, mJob); return err }},
		{name: "JobsReclaimExpired", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobsReclaimExpired(ctx, time.Time{})
			return err
		}},
		{name: "JobsLoad", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobsLoad(ctx, 0, 500*time.Millisecond, 100)
			return err
		}},
		{name: "JobsClaim", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobsClaim(ctx, "inc-MARK", "node-MARK", 7, store.Lease(15*time.Second))
			return err
		}},
		{name: "JobRenewLeaseIfRunning", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobRenewLeaseIfRunning(ctx, 41, 42, 15*time.Second)
			return err
		}},
		{name: "JobFinishIfRunning (done)", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobFinishIfRunning(ctx, 41, 42, store.Outcome{State: store.StateDone, Status: 204})
			return err
		}},
		{name: "JobFinishIfRunning (retry)", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobFinishIfRunning(ctx, 41, 42, store.Outcome{State: store.StateReady, RetryAfter: time.Minute, Status: 503, Error: "MARK 503"})
			return err
		}},
		{name: "JobsFinish", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobsFinish(ctx, []store.Finish{{ID: 41, Token: 42, Outcome: store.Outcome{State: store.StateDone, Status: 204}},
				{ID: 43, Token: 44, Outcome: store.Outcome{State: store.StateReady, RetryAfter: time.Minute, Status: 503, Error: "MARK 503"}}})
			return err
		}},
		{name: "JobInsertClaimed", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobInsertClaimed(ctx, mJob, "inc-MARK", "node-MARK", store.Lease(15*time.Second))
			return err
		}},
		{name: "JobReleaseIfRunning", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobReleaseIfRunning(ctx, 41, 42, "stopping MARK")
			return err
		}},
		{name: "JobsReleaseOwned", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobsReleaseOwned(ctx, "inc-MARK", "stopping MARK")
			return err
		}},
		{name: "JobGet", sends: 1, run: func(ctx context.Context, s *store.Store) error { _, err := s.JobGet(ctx, 41); return err }},
		{name: "JobsList", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobsList(ctx, store.JobFilter{States: []string{store.StateReady}, EndpointPrefix: "/jobs/MARK", Since: time.Hour, Before: 99, Retrying: true, Limit: 10})
			return err
		}},
		{name: "JobCancelIfWaiting", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobCancelIfWaiting(ctx, 41, "operator MARK")
			return err
		}},
		{name: "JobCancel (waiting)", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobCancel(ctx, 41, "operator MARK")
			return err
		}},
		{name: "JobCancel (finished)", sends: 3, respond: func(c storetest.Call) storetest.Reply {
			if strings.HasPrefix(c.Query, "SELECT state") {
				return storetest.Reply{Columns: []string{"state"}, Rows: [][]any{{store.StateDone}}}
			}
			return storetest.Reply{Affected: 0}
		}, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobCancel(ctx, 41, "operator MARK")
			return err
		}},
		{name: "JobsRetry", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobsRetry(ctx, store.JobFilter{States: []string{store.StateDead, store.StateFailed}, Since: time.Hour, Limit: 500}, "operator MARK")
			return err
		}},
		{name: "JobsByUniqueKey", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobsByUniqueKey(ctx, []string{"unique-MARK", "other-MARK"})
			return err
		}},
		{name: "JobInsertMany", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobInsertMany(ctx, []store.NewJob{mJob, atJob})
			return err
		}},
		{name: "JobCounts", sends: 1, run: func(ctx context.Context, s *store.Store) error { _, err := s.JobCounts(ctx); return err }},
		{name: "JobCountsCapped", sends: 1, run: func(ctx context.Context, s *store.Store) error { _, err := s.JobCountsCapped(ctx, 10000); return err }},
		{name: "JobsPrune", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobsPrune(ctx, store.StateDone, 24*time.Hour, 500)
			return err
		}},
		{name: "NodesPrune", sends: 1, run: func(ctx context.Context, s *store.Store) error { _, err := s.NodesPrune(ctx, 24*time.Hour); return err }},
		{name: "JobsSetAsideUnreachable", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobsSetAsideUnreachable(ctx, 367*24*time.Hour, 500)
			return err
		}},
		{name: "JobsRenewLeases", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobsRenewLeases(ctx, "inc-MARK", store.Lease(15*time.Second))
			return err
		}},
		{name: "TaskInsert (new)", sends: 1, run: func(ctx context.Context, s *store.Store) error { return s.TaskInsert(ctx, mTask) }},
		{name: "TaskInsert (name of a deleted task)", sends: 2, respond: answer("INSERT", duplicate(2627), 0),
			run: func(ctx context.Context, s *store.Store) error { return s.TaskInsert(ctx, mTask) }},
		{name: "TasksRenew", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.TasksRenew(ctx, "inc-MARK", store.Lease(15*time.Second))
			return err
		}},
		{name: "Tasks", sends: 1, run: func(ctx context.Context, s *store.Store) error { _, err := s.Tasks(ctx, true); return err }},
		{name: "TaskGet", sends: 1, run: func(ctx context.Context, s *store.Store) error { _, err := s.TaskGet(ctx, "task-MARK"); return err }},
		{name: "TaskAssignIfUnowned", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.TaskAssignIfUnowned(ctx, "task-MARK", "inc-MARK", "node-MARK", store.Lease(15*time.Second), 3*time.Second)
			return err
		}},
		{name: "TaskRequestHandoff", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.TaskRequestHandoff(ctx, "task-MARK", 42)
			return err
		}},
		{name: "TaskReleaseIfHeld", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.TaskReleaseIfHeld(ctx, "task-MARK", 42)
			return err
		}},
		{name: "TasksReleaseAll", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.TasksReleaseAll(ctx, "inc-MARK")
			return err
		}},
		{name: "TaskRecordCall", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.TaskRecordCall(ctx, "task-MARK", 42, false, 500, "MARK failed")
			return err
		}},
		{name: "TaskRequestDelete", sends: 2, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.TaskRequestDelete(ctx, "task-MARK")
			return err
		}},
		{name: "TaskMarkDeleted", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.TaskMarkDeleted(ctx, "task-MARK", 42)
			return err
		}},
		{name: "TasksFinishOrphanedDeletes", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.TasksFinishOrphanedDeletes(ctx)
			return err
		}},
		{name: "ScheduleInsert", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			return s.ScheduleInsert(ctx, mSchedule, at)
		}},
		{name: "ScheduleUpdate", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.ScheduleUpdate(ctx, mSchedule, &at)
			return err
		}},
		{name: "ScheduleGet", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.ScheduleGet(ctx, "schedule-MARK")
			return err
		}},
		{name: "Schedules", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, _, err := s.Schedules(ctx)
			return err
		}},
		{name: "SchedulesDue", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, _, err := s.SchedulesDue(ctx, 2*time.Second)
			return err
		}},
		{name: "ScheduleMaterialize", sends: 2, run: func(ctx context.Context, s *store.Store) error {
			_, _, err := s.ScheduleMaterialize(ctx, "schedule-MARK", 7, []store.NewJob{mOccurrence}, at, &at, 3)
			return err
		}},
		{name: "ScheduleMaterialize (schedule moved on)", sends: 1, respond: answer("UPDATE", nil, 0),
			run: func(ctx context.Context, s *store.Store) error {
				_, _, err := s.ScheduleMaterialize(ctx, "schedule-MARK", 7, []store.NewJob{mOccurrence}, at, nil, 0)
				return err
			}},
		{name: "ScheduleSetEnabled", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.ScheduleSetEnabled(ctx, "schedule-MARK", true, &at)
			return err
		}},
		{name: "ScheduleDelete", sends: 2, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.ScheduleDelete(ctx, "schedule-MARK")
			return err
		}},
		{name: "ScheduleTrigger", sends: 2, respond: func(c storetest.Call) storetest.Reply {
			if strings.HasPrefix(c.Query, "UPDATE") {
				return storetest.Reply{Affected: 1}
			}
			return storetest.Reply{Columns: []string{"id"}, Rows: [][]any{{int64(7)}}}
		}, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.ScheduleTrigger(ctx, "schedule-MARK", mOccurrence)
			return err
		}},
		{name: "JobThroughput", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobThroughput(ctx, time.Hour, 1000)
			return err
		}},
		{name: "ScheduleOutcomes", sends: 2, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.ScheduleOutcomes(ctx)
			return err
		}},
		{name: "QueueRoutesPut", sends: 3, run: func(ctx context.Context, s *store.Store) error {
			return s.QueueRoutesPut(ctx, []store.QueueRoute{{Prefix: "/MARK/", Queue: "q-MARK"}, {Prefix: "/MARK/b/", Queue: "b-MARK"}})
		}},
		{name: "QueueRoutes", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.QueueRoutes(ctx)
			return err
		}},
		{name: "QueuePause", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			return s.QueuePause(ctx, "q-MARK", "actor-MARK", true)
		}},
		{name: "QueuePause (new queue, resumed)", sends: 2, respond: answer("UPDATE", nil, 0), run: func(ctx context.Context, s *store.Store) error {
			return s.QueuePause(ctx, "q-MARK", "actor-MARK", false)
		}},
		{name: "QueueSettingsPut", sends: 2, run: func(ctx context.Context, s *store.Store) error {
			return s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "q-MARK", Priority: 3, Limit: 2, NodeLimit: 1, Rate: 50, RatePeriod: 10 * time.Second}})
		}},
		{name: "QueueSettingsPut (new queue)", sends: 3, respond: answer("UPDATE [sp_unit].[queues] SET rate_window", nil, 0), run: func(ctx context.Context, s *store.Store) error {
			return s.QueueSettingsPut(ctx, []store.QueueSettings{{Name: "q-MARK", Limit: 2}})
		}},
		{name: "JobsClaimManaged", sends: 4, respond: func(c storetest.Call) storetest.Reply {
			if strings.HasPrefix(strings.TrimSpace(c.Query), "SELECT SYSUTCDATETIME()") {
				return storetest.Reply{Columns: []string{"now"}, Rows: [][]any{{at}}}
			}
			if strings.HasPrefix(strings.TrimSpace(c.Query), "SELECT q.name") {
				return storetest.Reply{Columns: []string{"name", "priority", "max_running", "max_per_node", "rate_limit", "rate_used", "rate_window", "rate_period_ms", "running", "mine"},
					Rows: [][]any{{"q-MARK", int64(3), int64(2), nil, int64(50), int64(7), int64(190000000), int64(10000), int64(1), int64(0)}}}
			}
			return storetest.Reply{Affected: 1}
		}, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobsClaimManaged(ctx, "inc-MARK", "node-MARK", 7, store.Lease(15*time.Second), true)
			return err
		}},
		{name: "QueueWork", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, _, err := s.QueueWork(ctx, "q-MARK", 7)
			return err
		}},
		{name: "Queues", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.Queues(ctx)
			return err
		}},
		{name: "QueueCancel", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, _, err := s.QueueCancel(ctx, "q-MARK", "operator MARK", false)
			return err
		}},
		{name: "QueueCancel (waiting too)", sends: 2, run: func(ctx context.Context, s *store.Store) error {
			_, _, err := s.QueueCancel(ctx, "q-MARK", "operator MARK", true)
			return err
		}},
		{name: "QueuesPaused", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.QueuesPaused(ctx)
			return err
		}},
		{name: "QueuesHeld", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.QueuesHeld(ctx)
			return err
		}},
		{name: "QueueStartDelays", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.QueueStartDelays(ctx, 5*time.Minute, 1000)
			return err
		}},
		{name: "JobsSearch", sends: 3, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobsSearch(ctx, store.JobSearch{Text: "42", Limit: 20, Scan: 5000})
			return err
		}},
		{name: "JobsSearch (text)", sends: 3, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobsSearch(ctx, store.JobSearch{Text: "MARK", Limit: 20})
			return err
		}},
		{name: "JobsSearch (no text)", sends: 0, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.JobsSearch(ctx, store.JobSearch{Limit: 20})
			return err
		}},
		{name: "AuditAdd", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.AuditAdd(ctx, store.AuditEntry{Actor: "actor-MARK", Origin: "host-MARK", Action: "queue.pause", Target: "q-MARK", Detail: "MARK"})
			return err
		}},
		{name: "AuditAdd (no actor)", sends: 0, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.AuditAdd(ctx, store.AuditEntry{Action: "queue.pause", Target: "q-MARK"})
			return err
		}},
		{name: "AuditList", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.AuditList(ctx, store.AuditFilter{Since: time.Hour, Before: 99, Actor: "actor-MARK", Action: "queue", Limit: 50})
			return err
		}},
		{name: "AuditList (unfiltered)", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.AuditList(ctx, store.AuditFilter{Limit: 50})
			return err
		}},
		{name: "AuditPrune", sends: 1, run: func(ctx context.Context, s *store.Store) error {
			_, err := s.AuditPrune(ctx, 30*24*time.Hour, 500)
			return err
		}},
	}
}

// noSQL are the store's methods that send nothing (CheckFile: a stat of
// the SQLite file; KeepIdleFor: a setting of the pool; NodeLockTake,
// NodeNotify: SQL Server has no session lock or notes, its nodes are live
// by their turns' promise; the one refuses, the other sends nothing;
// SessionLocks, HearsNotes, PushesDue and FusesFinishAndClaim say what
// the dialect can; JobsFinishAndClaim refuses on SQL Server, whose nodes
// record results and claim apart). LoadStatement exists only in tests
// (export_test.go) and builds JobsLoad's statement, which is checked; so
// do the admin reads' ListStatement, RetryStatement, ThroughputStatement
// and CountsStatement. SetWindowRows (a test's setting) sends nothing; nor
// do Driver, WithDriver (a store on another driver) and UndefinedTable (the
// driver's reading of an error).
var noSQL = map[string]bool{"Driver": true, "WithDriver": true, "UndefinedTable": true, "KeepIdleFor": true, "LoadStatement": true, "ListStatement": true, "RetryStatement": true,
	"ThroughputStatement": true, "CountsStatement": true, "SetWindowRows": true, "SessionLocks": true, "HearsNotes": true, "HearsWakes": true, "PushesDue": true, "FusesFinishAndClaim": true, "JobsFinishAndClaim": true, "NodeLockTake": true, "NodeNotify": true, "Close": true, "DB": true, "Dialect": true, "Statements": true, "CheckFile": true, "WithTx": true, "InTx": true}

// Every operation of the store is in the list above: a new one must say
// what it sends to SQL Server.
func TestSQLServerStatementsCoverEveryOperation(t *testing.T) {
	covered := map[string]bool{}
	for _, o := range sqlServerOps() {
		covered[strings.Fields(o.name)[0]] = true
	}
	st := reflect.TypeFor[*store.Store]()
	for i := range st.NumMethod() {
		name := st.Method(i).Name
		if !noSQL[name] && !covered[name] {
			t.Errorf("Store.%s is not in sqlServerOps: add it, so that its T-SQL is checked", name)
		}
	}
}

// The only literals a statement may hold: fixed state names, and the empty
// string.
var allowedLiterals = map[string]bool{"": true, "up": true, "left": true,
	store.StateReady: true, store.StateRunning: true, store.StateDone: true, store.StateFailed: true,
	store.StateDead: true, store.StateCancelled: true, store.StateMissed: true,
	store.TaskCreated: true, store.TaskDeleting: true, store.TaskDeleted: true, // TaskRunning is StateRunning
	store.DefaultQueue: true}

var (
	placeholderRE = regexp.MustCompile(`@p(\d+)`)
	literalRE     = regexp.MustCompile(`N?'((?:[^']|'')*)'`)
	forbiddenRE   = regexp.MustCompile(`(?i)\bLIMIT\b|\bRETURNING\b|\bMERGE\b|\|\||\bON\s+CONFLICT\b|\bFOR\s+UPDATE\b|\bSKIP\s+LOCKED\b|` +
		`\bclock_timestamp\b|\bunixepoch\b|\binterval\b|::|\bTRUE\b|\bFALSE\b|\bILIKE\b|"|\{|\}|\bslotpoller_|` +
		`\bGETDATE\b|\bGETUTCDATE\b|\bSYSDATETIME\b|\bSYSDATETIMEOFFSET\b|\bCURRENT_TIMESTAMP\b|\bNOW\s*\(`)
	// holdRE finds a hold, added in one DATEADD.
	holdRE    = regexp.MustCompile(`DATEADD\(millisecond, CAST\(CASE WHEN (j\.)?timeout_ms <= 0 OR (j\.)?timeout_ms > 86400000 THEN`)
	dateAddRE = regexp.MustCompile(`DATEADD\(millisecond, CAST\((@p\d+) % 86400000 AS int\), DATEADD\(day, CAST\((@p\d+) / 86400000 AS int\), SYSUTCDATETIME\(\)\)\)`)
)

func TestSQLServerStatements(t *testing.T) {
	d, err := store.NewSQLServer("sp_unit")
	require.NoError(t, err)
	var golden strings.Builder
	golden.WriteString("-- The T-SQL each store operation sends (schema sp_unit), with its parameters' Go types.\n")
	golden.WriteString("-- Generated by: go test ./internal/store -run TestSQLServerStatements -update\n")
	for _, o := range sqlServerOps() {
		t.Run(o.name, func(t *testing.T) {
			s, tr := storetest.NewTrace(t, d, o.respond)
			_ = o.run(context.Background(), s) // the scripted answers make some fail; the statements are what counts
			calls := tr.Calls()
			require.Len(t, calls, o.sends, "statements sent")
			fmt.Fprintf(&golden, "\n-- %s\n", o.name)
			for _, c := range calls {
				checkTSQL(t, c)
				types := make([]string, len(c.Args))
				for i, a := range c.Args {
					types[i] = fmt.Sprintf("@p%d %T", i+1, a)
				}
				if len(types) > 0 {
					fmt.Fprintf(&golden, "-- %s\n", strings.Join(types, ", "))
				}
				fmt.Fprintf(&golden, "%s;\n", strings.TrimSpace(c.Query))
			}
		})
	}
	path := filepath.Join("testdata", "sqlserver.sql")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(golden.String()), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./internal/store -run TestSQLServerStatements -update to write it")
	require.Equal(t, string(want), golden.String(),
		"the T-SQL sent changed: read the diff, then run go test ./internal/store -run TestSQLServerStatements -update")
}

// checkTSQL checks one statement as SQL Server would receive it.
func checkTSQL(t *testing.T, c storetest.Call) {
	t.Helper()
	q := c.Query
	require.NotContains(t, q, "?", "every placeholder is numbered:\n%s", q)
	if m := forbiddenRE.FindString(q); m != "" {
		t.Errorf("%q is not T-SQL slotpoller may send:\n%s", m, q)
	}

	// @p1..@pN, each argument used and none missing.
	used := map[int]bool{}
	for _, m := range placeholderRE.FindAllStringSubmatch(q, -1) {
		n, _ := strconv.Atoi(m[1])
		used[n] = true
	}
	for n := range used {
		require.True(t, n >= 1 && n <= len(c.Args), "@p%d with %d arguments:\n%s", n, len(c.Args), q)
	}
	require.Len(t, used, len(c.Args), "every argument is bound:\n%s", q)

	// Values travel as parameters: the statement holds no literal but
	// fixed state names, and no argument's text.
	for _, m := range literalRE.FindAllStringSubmatch(q, -1) {
		require.True(t, allowedLiterals[m[1]], "literal %s in:\n%s", m[0], q)
	}
	// Every parameter's declared type is fixed, whatever its value (one
	// cached plan per statement), and a NULL is typed: go-mssqldb sends a
	// bare nil as TDS type 0x1F, which Babelfish refuses (error 8009).
	for i, a := range c.Args {
		switch v := a.(type) {
		case mssql.NVarCharMax:
			if !allowedLiterals[string(v)] {
				require.NotContains(t, q, string(v), "argument @p%d is written into the statement", i+1)
			}
		case string:
			t.Errorf("argument @p%d is a string: go-mssqldb declares it nvarchar(len), a plan per length; send mssql.NVarCharMax", i+1)
		case nil:
			t.Errorf("argument @p%d is an untyped NULL (TDS type 0x1F): send a typed null", i+1)
		case sql.NullString:
			require.False(t, v.Valid, "argument @p%d: a string that is not NULL goes as mssql.NVarCharMax", i+1)
		case []byte:
			require.NotContains(t, q, string(v), "argument @p%d is written into the statement", i+1)
		case int64, int, civil.DateTime, mssql.NullDateTime, sql.NullInt64:
		default:
			t.Errorf("argument @p%d is a %T: go-mssqldb would bind it as a type the columns do not have", i+1, a)
		}
	}

	// Database time is SYSUTCDATETIME(); an offset from it is added in
	// whole days and the remaining milliseconds of one bigint parameter.
	adds := dateAddRE.FindAllStringSubmatch(q, -1)
	for _, m := range adds {
		require.Equal(t, m[1], m[2], "both halves of a DATEADD use the same parameter:\n%s", q)
	}
	// A hold (a lease or a call's length, a few days at most) is added
	// in one DATEADD of milliseconds.
	holds := len(holdRE.FindAllString(q, -1))
	require.Equal(t, 2*len(adds)+holds, strings.Count(q, "DATEADD("), "every DATEADD is the split form or a hold:\n%s", q)

	// Written rows come back through OUTPUT, read with a query, and the
	// clause sits before VALUES or WHERE.
	word := strings.Fields(q)[0]
	if strings.Contains(q, "OUTPUT") {
		require.False(t, c.Exec, "a statement with OUTPUT is read as a query:\n%s", q)
		require.Contains(t, q, "OUTPUT inserted.", q)
		// OUTPUT without INTO fails once anyone adds a trigger to the
		// table: the rows go into a table variable and are read from it.
		require.Regexp(t, `(?s)^DECLARE @out TABLE \(.*\);\n.*OUTPUT inserted\.[^;]* INTO @out\b.*;\nSELECT [^;]* FROM @out`, q)
		out := strings.Index(q, "OUTPUT")
		if i := strings.Index(q, "VALUES"); i >= 0 {
			require.Less(t, out, i, "OUTPUT before VALUES:\n%s", q)
		}
		if i := strings.LastIndex(q, "WHERE"); i >= 0 {
			require.Less(t, out, i, "OUTPUT before WHERE:\n%s", q)
		}
	} else if word == "UPDATE" || word == "INSERT" {
		require.True(t, c.Exec, "a write without OUTPUT is sent with Exec, which counts its rows:\n%s", q)
	}
	if word != "SELECT" || strings.Contains(q, "FROM") {
		require.Contains(t, q, "[sp_unit].[", "tables are in the configured schema:\n%s", q)
	}
}

func TestSQLServerClaim(t *testing.T) {
	d, err := store.NewSQLServer("sp_unit")
	require.NoError(t, err)
	s, tr := storetest.NewTrace(t, d, func(c storetest.Call) storetest.Reply {
		cols := strings.Split("id, token, attempt, max_attempts, endpoint, method, payload, idem_key, timeout_ms, run_at, scheduled_for, queue, trace_parent", ", ")
		runAt := time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC)
		return storetest.Reply{Columns: cols, Rows: [][]any{
			{int64(7), int64(1), int64(1), int64(3), "/a", "POST", []byte("p"), "k7", int64(1500), runAt, nil, "default", nil},
			{int64(9), int64(4), int64(2), int64(3), "/b", "GET", nil, "k9", int64(0), runAt, runAt, "reports", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		}}
	})
	claims, err := s.JobsClaim(context.Background(), "inc-a", "node-a", 7, store.Lease(15*time.Second))
	require.NoError(t, err)
	require.Len(t, claims, 2)
	require.Equal(t, int64(9), claims[1].ID)
	require.Equal(t, 1500*time.Millisecond, claims[0].Timeout)
	require.Empty(t, claims[0].Traceparent)
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", claims[1].Traceparent)

	calls := tr.Calls()
	require.Len(t, calls, 1)
	q := calls[0].Query
	require.Equal(t, []any{mssql.NVarCharMax("inc-a"), mssql.NVarCharMax("node-a"), 7, int64(15000), int64(math.MaxInt64), int64(0), int64(15000)},
		calls[0].Args, "owner, owner_node, limit, the hold: a row with no timeout, longer above, margin, lease")
	for _, want := range []string{
		"SELECT TOP (@p3) c.id FROM [sp_unit].[jobs] AS c WITH (UPDLOCK, READPAST, ROWLOCK, INDEX(jobs_due), FORCESEEK)",
		// Overlap: claims of one schedule's occurrences take turns on its row.
		"EXISTS (SELECT 1 FROM [sp_unit].[schedules] AS s WITH (UPDLOCK, READPAST, ROWLOCK) WHERE s.name = c.schedule)\n    AND NOT EXISTS",
		"WHERE c.state = 'ready' AND c.run_at <= SYSUTCDATETIME()",
		"ORDER BY c.run_at, c.id) AS picked ON j.id = picked.id",
		// A counter at its type's maximum is not bumped: the row is set
		// aside rather than failing the claim of every row.
		"owner = @p1, owner_node = @p2, token = j.token + CASE WHEN j.token < 9223372036854775807 THEN 1 ELSE 0 END",
		"attempt = j.attempt + CASE WHEN j.attempt < 2147483647 THEN 1 ELSE 0 END",
		"lease_until = DATEADD(millisecond, CAST(CASE WHEN j.timeout_ms <= 0 OR j.timeout_ms > 86400000 THEN CAST(@p4 AS BIGINT) WHEN j.timeout_ms > CAST(@p5 AS BIGINT) " +
			"THEN j.timeout_ms + CAST(@p6 AS BIGINT) ELSE CAST(@p7 AS BIGINT) END AS int), SYSUTCDATETIME())",
		"OUTPUT inserted.id, inserted.token, inserted.attempt, inserted.max_attempts, inserted.endpoint, inserted.method, " +
			"inserted.payload, inserted.idem_key, inserted.timeout_ms, inserted.run_at, inserted.scheduled_for, inserted.queue, inserted.trace_parent INTO @out",
		"FROM [sp_unit].[jobs] AS j WITH (ROWLOCK) INNER JOIN (",
		// One winner without READPAST: the update re-checks the row it writes.
		"WHERE j.state = 'ready'",
	} {
		require.Contains(t, q, want)
	}
	require.NotContains(t, q, "SERIALIZABLE", "no key-range locks: concurrent claims would need them too")
}

// An absolute run time is bound as a datetime2 (civil.DateTime) holding the
// UTC wall time, never as a time.Time (a datetimeoffset, whose conversion
// to datetime2 would keep the local wall time).
func TestSQLServerTimeArg(t *testing.T) {
	at := time.Date(2030, 5, 6, 9, 8, 9, 123456700, time.FixedZone("CEST", 2*3600))
	v := store.SQLServer{}.TimeArg(at)
	require.Equal(t, civil.DateTime{Date: civil.Date{Year: 2030, Month: 5, Day: 6}, Time: civil.Time{Hour: 7, Minute: 8, Second: 9, Nanosecond: 123456700}}, v)
}

// The split DATEADD covers any duration: the remainder always fits an int,
// and so does the day count of the longest time.Duration.
func TestSQLServerMillisSplit(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, -3 * time.Second, 25 * 24 * time.Hour, -400 * 24 * time.Hour, math.MaxInt64, math.MinInt64} {
		ms := d.Milliseconds()
		days, rest := ms/86400000, ms%86400000 // T-SQL's / and % truncate toward zero, as Go's do
		require.Equal(t, ms, days*86400000+rest)
		require.Less(t, math.Abs(float64(rest)), float64(math.MaxInt32))
		require.Less(t, math.Abs(float64(days)), float64(math.MaxInt32))
	}
}

// failFirst answers each call with the next of failures, then, once they
// are spent, with one row changed.
func failFirst(failures *[]error) func(storetest.Call) storetest.Reply {
	return func(storetest.Call) storetest.Reply {
		if len(*failures) > 0 {
			err := (*failures)[0]
			*failures = (*failures)[1:]
			return storetest.Reply{Err: err}
		}
		return storetest.Reply{Affected: 1}
	}
}

// Deadlock victims and lock timeouts are sent again with backoff; other
// errors are not.
func TestSQLServerRetriesDeadlockVictims(t *testing.T) {
	failures := []error{mssql.Error{Number: 1205}, mssql.Error{Number: 1222}}
	s, tr := storetest.NewTrace(t, store.SQLServer{}, failFirst(&failures))
	ok, err := s.JobRenewLeaseIfRunning(context.Background(), 1, 1, time.Second)
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, tr.Calls(), 3)

	failures = []error{mssql.Error{Number: 547}} // a constraint conflict is not transient
	_, err = s.JobRenewLeaseIfRunning(context.Background(), 1, 1, time.Second)
	require.Error(t, err)
	require.Len(t, tr.Calls(), 1)
}

func TestSQLServerSchemaNames(t *testing.T) {
	for _, ok := range []string{"slotpoller", "_x", "A1_b", strings.Repeat("a", 128)} {
		d, err := store.NewSQLServer(ok)
		require.NoError(t, err, ok)
		require.Equal(t, "["+ok+"].[jobs]", d.Table("jobs"))
	}
	for _, bad := range []string{"1a", "a-b", "a b", "a]", "a'", "a;", "dbo.x", "é", strings.Repeat("a", 129)} {
		_, err := store.NewSQLServer(bad)
		require.Error(t, err, bad)
	}
	require.Equal(t, "[slotpoller].[nodes]", store.SQLServer{}.Table("nodes"), "the zero value uses the default schema")

	// Open checks the name before it connects.
	_, err := open.Store(context.Background(), "sqlserver", "sqlserver://u:pw@127.0.0.1:1?database=x", store.WithSchema("x];DROP TABLE y;--"))
	require.ErrorContains(t, err, "not a plain identifier")
}

func TestExpandScript(t *testing.T) {
	d, err := store.NewSQLServer("farm")
	require.NoError(t, err)
	require.Equal(t, "IF SCHEMA_ID(N'farm') IS NULL EXEC(N'CREATE SCHEMA [farm]'); CREATE TABLE [farm].[jobs] (x INT); SELECT ?",
		store.ExpandScript(d, "IF SCHEMA_ID(N'{schema}') IS NULL EXEC(N'CREATE SCHEMA [{schema}]'); CREATE TABLE {jobs} (x INT); SELECT ?"))
	require.Equal(t, "CREATE TABLE slotpoller_jobs (x INT); {schema}", store.ExpandScript(store.SQLite{}, "CREATE TABLE {jobs} (x INT); {schema}"),
		"a dialect without schemas leaves {schema} alone")
}

// The other dialects bind the same arguments the same way: their
// placeholders match the argument count too.
func TestPlaceholdersMatchArguments(t *testing.T) {
	dollar := regexp.MustCompile(`\$(\d+)`)
	for _, d := range []store.Dialect{store.SQLite{}, store.Postgres{}} {
		for _, o := range sqlServerOps() {
			t.Run(d.Name()+"/"+o.name, func(t *testing.T) {
				s, tr := storetest.NewTrace(t, d, nil) // the scripted errors are SQL Server's: default answers

				_ = o.run(context.Background(), s)
				for _, c := range tr.Calls() {
					require.NotContains(t, c.Query, "{", c.Query)
					if d.Name() == "sqlite" {
						require.Equal(t, len(c.Args), strings.Count(c.Query, "?"), c.Query)
						continue
					}
					used := map[string]bool{}
					for _, m := range dollar.FindAllStringSubmatch(c.Query, -1) {
						used[m[1]] = true
					}
					nums := make([]int, 0, len(used))
					for k := range used {
						n, _ := strconv.Atoi(k)
						nums = append(nums, n)
					}
					sort.Ints(nums)
					for i, n := range nums {
						require.Equal(t, i+1, n, c.Query)
					}
					args := 0
					for _, a := range c.Args {
						if _, mode := a.(pgx.QueryExecMode); !mode { // how pgx runs it, not a parameter
							args++
						}
					}
					require.Len(t, nums, args, c.Query)
				}
			})
		}
	}
}

// A listing asks the server for at most limit rows, instead of reading
// every job and dropping the rest.
func TestSQLServerJobsListIsBounded(t *testing.T) {
	s, tr := storetest.NewTrace(t, store.SQLServer{}, nil)
	_, err := s.JobsList(context.Background(), store.JobFilter{Limit: 25})
	require.NoError(t, err)
	calls := tr.Calls()
	require.Len(t, calls, 1)
	require.True(t, strings.HasPrefix(calls[0].Query, "SELECT TOP (@p1) "), calls[0].Query)
	require.Equal(t, 25, calls[0].Args[0])
}

// The lease renewal reaches its rows through the primary key, as a finish
// does: both then lock a job's row before its index keys, and cannot
// deadlock each other on one job (the renewal used to come in through the
// (state, lease_until) index, locking in the opposite order).
func TestSQLServerRenewalLocksInFinishOrder(t *testing.T) {
	d, err := store.NewSQLServer("sp_unit")
	require.NoError(t, err)
	s, tr := storetest.NewTrace(t, d, nil)
	_, _ = s.JobsRenewLeases(context.Background(), "inc-a", store.Lease(15*time.Second))
	calls := tr.Calls()
	require.Len(t, calls, 1)
	q := calls[0].Query
	require.Contains(t, q, "FROM [sp_unit].[jobs] AS j WITH (ROWLOCK, INDEX(pk_jobs), FORCESEEK)\nWHERE j.id IN (SELECT r.id FROM [sp_unit].[jobs] AS r WHERE r.owner = @p5 AND r.state = 'running')")
	require.Contains(t, q, "AND j.owner = @p5 AND j.state = 'running'", "re-checked on the row it writes")
	require.Equal(t, []any{int64(15000), int64(math.MaxInt64), int64(0), int64(15000), mssql.NVarCharMax("inc-a")}, calls[0].Args)
}
