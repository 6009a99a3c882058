package store

import (
	"context"
	"strings"
	"time"
)

// reclaimable lists the rows JobsReclaimExpired takes, each a condition
// an index answers. The turn's hint (NodeTurn) looks for the same list: a
// row the reclaim would take but the hint did not see would wait for other
// work to bring a poll, for ever on a farm whose jobs all arrive by push.
// The clock is read once ({now_once}): a bound on PostgreSQL's clock read
// row by row is a filter, and the reclaim and the hint walked every
// running job's lease, thousands in a busy farm, at every turn.
var reclaimable = []struct {
	cond string
	args []any
}{
	{cond: "state = 'running' AND lease_until < {now_once}"},
	{cond: "state = 'running' AND lease_until IS NULL"},
	{cond: "state = 'running' AND lease_until > {now_once+?}", args: []any{millis(MaxHold)}},
	{cond: "state = 'ready' AND start_by < {now_once}"},
}

// JobsReclaimExpired returns running jobs whose lease ran out (their node
// died or froze) to the queue, due now; a job that has used all its attempts
// becomes dead instead (a running job without a lease, which no door
// writes, counts as expired). In the same statement, a schedule's occurrence that
// was not started by its start_by (run time plus tolerance) becomes missed.
// It returns how many rows it changed. A running job with no lease, or
// with one further ahead than any claim writes (MaxHold: written
// directly, or by a database clock stepped back by more than a day), is
// taken as expired: it would otherwise be held for ever.
//
// A non-zero notAfter is the latest the database's clock may read for the
// statement to change anything: the node's estimate of the database's now,
// carried forward on its monotonic clock, with room for the statement's
// deadline. A database clock that stepped ahead since the node last
// sampled it then reclaims nothing, where every lease renewed before the
// step would look run out.
func (s *Store) JobsReclaimExpired(ctx context.Context, notAfter time.Time) (int64, error) {
	var conds []string
	var whereArgs []any
	for _, r := range reclaimable {
		conds = append(conds, "("+r.cond+")")
		whereArgs = append(whereArgs, r.args...)
	}
	where := "(" + strings.Join(conds, " OR ") + ")"
	if !notAfter.IsZero() {
		where += " AND {now} <= ?"
		whereArgs = append(whereArgs, s.d.TimeArg(notAfter))
	}
	// A job whose cancel was requested (see cancel.go) ends cancelled,
	// whatever attempts it has left: it was asked to stop.
	p := s.d.TextParam()
	// The state is written last: the other columns read it, and MySQL
	// gives each assignment the columns as the earlier ones left them.
	set := `finished_at = CASE WHEN state = 'ready' OR cancel_requested_at IS NOT NULL OR attempt >= max_attempts THEN {now} ELSE NULL END,
  run_at = CASE WHEN state = 'ready' THEN run_at ELSE {now} END,
  last_error = CASE WHEN state = 'ready' THEN ? WHEN cancel_requested_at IS NOT NULL THEN CONCAT(` + p + `, cancel_requested_by, ` + p + `)
    ELSE ? END,
  history = CASE WHEN state = 'ready' THEN history ELSE ` + historyLine(s.d, "owner_node", "started_at",
		"CASE WHEN cancel_requested_at IS NOT NULL THEN CONCAT("+p+", cancel_requested_by, "+p+") WHEN attempt >= max_attempts THEN "+p+" ELSE "+p+" END") + ` END,
  owner = NULL, lease_until = NULL,
  state = CASE WHEN state = 'ready' THEN 'missed' WHEN cancel_requested_at IS NOT NULL THEN 'cancelled'
    WHEN attempt >= max_attempts THEN 'dead' ELSE 'ready' END`
	// A missed occurrence was never attempted: only an expired lease adds a
	// line to the history.
	const lease = "lease expired: the node running it stopped renewing (crashed, froze or lost the database)"
	cancelBefore, cancelAfter := cancelledErrorParts()
	args := append([]any{"missed: not started within its tolerance", cancelBefore, cancelAfter, lease}, historySeps()...)
	args = append(args, cancelledLine(), cancelAfter+"\n",
		historySuffix(StateDead, 0, lease), historySuffix(OutcomeReclaimed, 0, lease))
	// On MySQL the ids first (idsfirst.go): the condition is read through
	// the lease and start_by indexes.
	return updateWhere(ctx, s, nil, "reclaim expired leases", jobsByID, set, args, where, whereArgs)
}
