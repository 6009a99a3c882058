package jobs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// pruneDB stands in for the database: due rows per state, and each
// statement takes cost on the fake clock.
type pruneDB struct {
	clk    *clock.Fake
	cost   time.Duration
	due    map[string]int
	limits []int                    // the limit of every job delete
	ages   map[string]time.Duration // the age each state was pruned with
	nodes  int                      // node deletes
	audits []time.Duration          // the age of every audit delete
	looks  int                      // looks for unreachable jobs
	beyond time.Duration            // how far ahead they were looked for
	fail   error
}

func (d *pruneDB) JobsPrune(_ context.Context, state string, age time.Duration, limit int) (int64, error) {
	d.clk.Advance(d.cost)
	if d.fail != nil {
		return 0, d.fail
	}
	d.limits = append(d.limits, limit)
	d.ages[state] = age
	n := min(limit, d.due[state])
	d.due[state] -= n
	return int64(n), nil
}

func (d *pruneDB) NodesPrune(context.Context, time.Duration) (int64, error) {
	d.clk.Advance(d.cost)
	d.nodes++
	return 0, nil
}

func (d *pruneDB) AuditPrune(_ context.Context, age time.Duration, _ int) (int64, error) {
	d.clk.Advance(d.cost)
	d.audits = append(d.audits, age)
	return 0, nil
}

func (d *pruneDB) JobsSetAsideUnreachable(_ context.Context, beyond time.Duration, _ int) (int64, error) {
	d.clk.Advance(d.cost)
	d.looks++
	d.beyond = beyond
	return 0, nil
}

func newPruneDB(cost time.Duration, due map[string]int) *pruneDB {
	return &pruneDB{clk: clock.NewFake(t0), cost: cost, due: due, ages: map[string]time.Duration{}}
}

var retention = map[string]time.Duration{store.StateDone: 24 * time.Hour, store.StateFailed: 7 * 24 * time.Hour,
	store.StateDead: 7 * 24 * time.Hour, store.StateCancelled: 7 * 24 * time.Hour, store.StateMissed: 7 * 24 * time.Hour}

func TestPrunerCatchesUpThenLooksOncePerIdle(t *testing.T) {
	db := newPruneDB(10*time.Millisecond, map[string]int{store.StateDone: 1200, store.StateDead: 3})
	p := jobs.NewPruner(db, jobs.PruneOptions{Jobs: retention, Nodes: 24 * time.Hour, Batch: 500, Budget: 200 * time.Millisecond,
		Idle: time.Minute, Clock: db.clk})
	ctx := context.Background()

	res, err := p.Turn(ctx)
	require.NoError(t, err)
	require.Equal(t, jobs.PruneResult{Jobs: 1203, Statements: 1 + 1 + 3 + 4}, res, "unreachable jobs, nodes, done in three batches, one each for the others")
	require.Equal(t, retention, db.ages, "each state with its own retention")
	require.Equal(t, 1, db.nodes)
	require.Equal(t, 1, db.looks)
	require.Equal(t, jobs.MaxLeadTime+24*time.Hour, db.beyond, "further than any door writes")

	res, err = p.Turn(ctx)
	require.NoError(t, err)
	require.True(t, res.Skipped, "caught up: nothing sent until the idle pause is over")
	require.Equal(t, 9, len(db.limits)+db.nodes+db.looks)

	db.clk.Advance(time.Minute)
	res, err = p.Turn(ctx)
	require.NoError(t, err)
	require.False(t, res.Skipped)
	require.Equal(t, 7, res.Statements)
	for _, l := range db.limits {
		require.Equal(t, 500, l)
	}
}

// A backlog drains over turns, each turn stopping at its budget, and every
// statement within the batch.
func TestPrunerDrainsABacklogInBoundedTurns(t *testing.T) {
	db := newPruneDB(50*time.Millisecond, map[string]int{store.StateDone: 100_000, store.StateFailed: 700})
	p := jobs.NewPruner(db, jobs.PruneOptions{Jobs: retention, Batch: 500, Budget: 200 * time.Millisecond, Clock: db.clk})
	ctx := context.Background()
	turns := 0
	for {
		res, err := p.Turn(ctx)
		require.NoError(t, err)
		require.False(t, res.Skipped, "behind: every turn deletes")
		// The budget stops a state after the statement that crosses it;
		// each other state is looked at once.
		require.LessOrEqual(t, res.Statements, 4+4)
		require.LessOrEqual(t, res.Jobs, int64((4+4)*500))
		turns++
		if !res.Behind {
			break
		}
		db.clk.Advance(time.Second) // the node's next turn as slot owner
	}
	require.Zero(t, db.due[store.StateDone])
	require.Zero(t, db.due[store.StateFailed], "the states after the backlog's get their turn")
	require.Equal(t, 51, turns, "2,000 rows a turn, then the rest")
	for _, l := range db.limits {
		require.Equal(t, 500, l)
	}
}

// A farm finishing 1,000 jobs a second, a slot of 1s, statements of 8ms (the
// PostgreSQL mean at 100k rows): retention keeps up, the backlog never
// exceeds a second of jobs and a batch.
func TestPrunerKeepsUpWithAThousandJobsASecond(t *testing.T) {
	db := newPruneDB(8*time.Millisecond, map[string]int{store.StateDone: 0})
	p := jobs.NewPruner(db, jobs.PruneOptions{Jobs: retention, Clock: db.clk})
	worst := 0
	for range 600 {
		db.due[store.StateDone] += 1000
		_, err := p.Turn(context.Background())
		require.NoError(t, err)
		worst = max(worst, db.due[store.StateDone])
		db.clk.Advance(time.Second)
	}
	require.LessOrEqual(t, worst, 1000*int(jobs.DefaultPruneIdle/time.Second)+jobs.DefaultPruneBatch,
		"at most an idle pause of jobs waits past its retention")
	require.Less(t, db.due[store.StateDone], 61_000)
}

func TestPrunerKeepsWhatHasNoRetention(t *testing.T) {
	db := newPruneDB(time.Millisecond, map[string]int{store.StateDone: 10, store.StateDead: 10})
	p := jobs.NewPruner(db, jobs.PruneOptions{Jobs: map[string]time.Duration{store.StateDone: time.Hour, store.StateDead: 0}, Clock: db.clk})
	res, err := p.Turn(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 10, res.Jobs)
	require.Equal(t, 10, db.due[store.StateDead])
	require.Zero(t, db.nodes, "nodes kept: no node retention")

	none := jobs.NewPruner(db, jobs.PruneOptions{Clock: db.clk})
	require.False(t, none.Enabled())
	looks := db.looks
	res, err = none.Turn(context.Background())
	require.NoError(t, err)
	require.Equal(t, jobs.PruneResult{Statements: 1}, res, "no retention: only the look for unreachable jobs")
	require.Equal(t, looks+1, db.looks)
}

// A failed delete is tried again at the next turn, not after the idle pause.
func TestPrunerRetriesAFailedDeleteNextTurn(t *testing.T) {
	db := newPruneDB(time.Millisecond, map[string]int{store.StateDone: 10})
	db.fail = errors.New("deadlock victim")
	p := jobs.NewPruner(db, jobs.PruneOptions{Jobs: retention, Clock: db.clk})
	_, err := p.Turn(context.Background())
	require.ErrorContains(t, err, "deadlock victim")
	db.fail = nil
	res, err := p.Turn(context.Background())
	require.NoError(t, err)
	require.False(t, res.Skipped)
	require.EqualValues(t, 10, res.Jobs)
}

// In a farm, retention is looked at once per Idle of database time by the
// owner of that slot, not once per Idle by every node: its cost does not
// grow with the farm.
func TestPrunerInSlotsLooksOncePerIdleForTheWholeFarm(t *testing.T) {
	db := newPruneDB(10*time.Millisecond, map[string]int{store.StateDone: 1200})
	farm := []*jobs.Pruner{}
	for range 16 {
		farm = append(farm, jobs.NewPruner(db, jobs.PruneOptions{Jobs: retention, Nodes: 24 * time.Hour, Batch: 500,
			Budget: 15 * time.Millisecond, Idle: time.Minute, Clock: db.clk}))
	}
	ctx := context.Background()
	var looked []int64
	// Two minutes of 1 s slots, slot k owned by node k mod 16.
	for k := int64(6000); k < 6120; k++ {
		res, err := farm[k%16].TurnInSlot(ctx, k, time.Second)
		require.NoError(t, err)
		if !res.Skipped {
			looked = append(looked, k)
		}
	}
	// Each node looks at its first turn, once (a node just started); the
	// first ones stop on their budget and go on at their next turn. From
	// the second rotation on, the farm looks once a minute: slot 6060.
	// Sixteen nodes pacing themselves would look 16 times a minute.
	require.Zero(t, db.due[store.StateDone])
	var later []int64
	for _, k := range looked {
		if k >= 6032 {
			later = append(later, k)
		}
	}
	require.Equal(t, []int64{6060}, later, "once a minute for the whole farm")
	require.LessOrEqual(t, len(looked), 16+3, "a first look each, and the turns that caught up: %v", looked)
	res, err := farm[1].TurnInSlot(ctx, 6121, time.Second)
	require.NoError(t, err)
	require.True(t, res.Skipped)
}

// The audit log's entries go after jobs.retention_audit: one delete a
// look, with that age; none without a retention.
func TestPrunerDeletesOldAuditEntriesOncePerLook(t *testing.T) {
	db := newPruneDB(time.Millisecond, map[string]int{})
	p := jobs.NewPruner(db, jobs.PruneOptions{Audit: 90 * 24 * time.Hour, Idle: time.Minute, Clock: db.clk})
	require.True(t, p.Enabled(), "an audit retention alone is something to prune")
	ctx := context.Background()
	res, err := p.Turn(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, res.Statements, "the look for unreachable jobs, and the audit delete")
	require.Equal(t, []time.Duration{90 * 24 * time.Hour}, db.audits)
	res, err = p.Turn(ctx)
	require.NoError(t, err)
	require.True(t, res.Skipped)
	db.clk.Advance(time.Minute)
	_, err = p.Turn(ctx)
	require.NoError(t, err)
	require.Len(t, db.audits, 2, "once per look")

	kept := newPruneDB(time.Millisecond, map[string]int{})
	_, err = jobs.NewPruner(kept, jobs.PruneOptions{Clock: kept.clk}).Turn(ctx)
	require.NoError(t, err)
	require.Empty(t, kept.audits, "no retention keeps the log")
}
