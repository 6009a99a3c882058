package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// Cancel of a running job. A running job is not changed by the operator's
// request: its row gets who asked and when (cancel_requested_by and _at,
// the database clock), and the node that holds it learns of the request
// from its next lease renewal (JobsRenewLeases reports it per held job),
// cancels the call and records the end as cancelled, fenced by its token,
// with no retry. Until then the row stays running under its owner: only
// the owner's token may end it. Two other statements honour the request,
// so that no path runs the job again once it was asked to stop:
//   - a result that would retry it (JobsFinish, JobFinishIfRunning) ends
//     it cancelled instead: the call failed before the renewal told the
//     node;
//   - a reclaim of its expired lease (JobsReclaimExpired) ends it
//     cancelled, not ready;
//   - so does a release (JobReleaseIfRunning, JobsReleaseOwned: a node
//     that stops, or gives back a claim it could not start).
//
// An operator's retry (JobsRetry) is a fresh run: it clears the request.
//
// A call that succeeds before the node hears of the request ends done.

// CancelResult is what JobCancel did.
type CancelResult int

// What JobCancel did.
const (
	// CancelNotFound: no job has that id.
	CancelNotFound CancelResult = iota
	// CancelFinished: the job had already finished; nothing changed.
	CancelFinished
	// CancelledWaiting: the job waited (ready or backing off); it is
	// cancelled now.
	CancelledWaiting
	// CancelRequested: the job runs; its node stops the call within one
	// lease renewal (lease/3) and records it cancelled. A second request
	// for the same call keeps the first one's actor and time.
	CancelRequested
)

// String names the result for logs and messages.
func (r CancelResult) String() string {
	switch r {
	case CancelFinished:
		return "already finished"
	case CancelledWaiting:
		return "cancelled"
	case CancelRequested:
		return "cancel requested"
	default:
		return "not found"
	}
}

// CancelledWhileRunning is the error a job cancelled while running ends
// with: who asked.
func CancelledWhileRunning(actor string) string {
	before, after := cancelledErrorParts()
	return before + actor + after
}

// cancelledErrorParts are the text of CancelledWhileRunning around the
// actor, for a statement that reads the actor from the row.
func cancelledErrorParts() (before, after string) {
	return "cancelled by ", " while running"
}

// JobCancel cancels job id for actor: a waiting job at once (as
// JobCancelIfWaiting), a running one by a request its node acts on (see
// above). It reports which of the two happened, or that there was nothing
// to cancel. A job that moves between waiting and running while it is
// asked (a retry becoming due and claimed) is asked again, a few times.
func (s *Store) JobCancel(ctx context.Context, id int64, actor string) (CancelResult, error) {
	request := s.statement(`UPDATE {jobs} SET cancel_requested_by = ?, cancel_requested_at = {now}
WHERE id = ? AND state = 'running' AND cancel_requested_at IS NULL`)
	read := s.statement(`SELECT state FROM {jobs} WHERE id = ?`)
	for range 3 {
		if ok, err := s.JobCancelIfWaiting(ctx, id, actor); err != nil || ok {
			return outcome(ok, CancelledWaiting), err
		}
		ok, err := s.fenced(ctx, fmt.Sprintf("request cancel of running job %d", id), request, oneLine(cut(actor, maxActor)), id)
		if err != nil || ok {
			return outcome(ok, CancelRequested), err
		}
		var state string
		err = s.retry(ctx, func() error { return s.queryRow(ctx, read, id).Scan(&state) })
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return CancelNotFound, nil
		case err != nil:
			return CancelNotFound, fmt.Errorf("cancel job %d: read its state: %w", id, err)
		case state == StateRunning:
			return CancelRequested, nil // asked before: the first request stands
		case state != StateReady:
			return CancelFinished, nil
		}
		// Ready again (its call failed and it backs off): cancel it waiting.
	}
	return CancelNotFound, fmt.Errorf("cancel job %d: it kept moving between waiting and running; try again", id)
}

// outcome is r when ok, else CancelNotFound (a write that failed).
func outcome(ok bool, r CancelResult) CancelResult {
	if ok {
		return r
	}
	return CancelNotFound
}

// oneLine is an actor as a history line can hold it (the end of a
// cancelled run's line is written from the row): tabs and line breaks
// become spaces.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}

// cancelledError is CancelledWhileRunning as an expression on a row of
// the jobs table (t: its name or alias and a dot, or ""), with two text
// parameters: cancelledErrorParts.
func cancelledError(d Dialect, t string) string {
	p := d.TextParam()
	return "CONCAT(" + p + ", " + t + "cancel_requested_by, " + p + ")"
}

// releaseSet is the SET list of a release of running rows: given back
// ready now, the interrupted attempt not counted, with a history line;
// or, for a row whose cancel was requested, ended cancelled as the
// request asked. Its parameters are releaseArgs'.
func (s *Store) releaseSet() string {
	p := s.d.TextParam()
	return `state = CASE WHEN cancel_requested_at IS NULL THEN 'ready' ELSE 'cancelled' END,
  owner = NULL, lease_until = NULL, run_at = {now},
  finished_at = CASE WHEN cancel_requested_at IS NULL THEN finished_at ELSE {now} END,
  last_error = CASE WHEN cancel_requested_at IS NULL THEN ? ELSE ` + cancelledError(s.d, "") + ` END,
  history = ` + historyLine(s.d, "owner_node", "started_at",
		"CASE WHEN cancel_requested_at IS NULL THEN "+p+" ELSE CONCAT("+p+", cancel_requested_by, "+p+") END") + `,
  attempt = CASE WHEN cancel_requested_at IS NOT NULL THEN attempt WHEN attempt > 0 THEN attempt - 1 ELSE 0 END`
}

// releaseArgs are the arguments of releaseSet for a release's reason.
func releaseArgs(reason string) []any {
	before, after := cancelledErrorParts()
	args := append([]any{reason, before, after}, historySeps()...)
	return append(args, historySuffix(OutcomeReleased, 0, reason), cancelledLine(), after+"\n")
}

// cancelledLine is the start of the history suffix of a run that ended
// cancelled, up to the actor, which the statement reads from the row.
func cancelledLine() string {
	before, _ := cancelledErrorParts()
	return strings.TrimSuffix(historySuffix(StateCancelled, 0, before), "\n")
}

// QueueCancel asks every running job of queue that was not asked already
// to stop, as JobCancel does for one (actor, the database time), and,
// when waiting is set, cancels the queue's waiting jobs (ready, backing
// off included) at once, as JobCancelIfWaiting does for one, history line
// included. It returns how many running jobs were asked and how many
// waiting ones were cancelled. Each node then stops its calls at its next
// lease renewal and records them cancelled, as for a single request.
//
// One write for each: the waiting ones first, so that a job claimed
// between the two is asked as a running one. A call that fails and goes
// back to backing off between the two writes is left waiting (a second
// QueueCancel cancels it).
//
// Its cost: each write reads an index of its state's rows (every
// running, or every ready, row of the farm: the state index or the
// partial index on running or ready rows, as the planner likes) and
// changes the queue's rows; finished jobs are not read. On MySQL each
// reads the queue's ids first, then writes them by primary key
// (idsfirst.go): through the queue's index, it would lock the index's
// entries before the rows, the order opposite to the claims and results
// that write the same rows at the same time.
func (s *Store) QueueCancel(ctx context.Context, queue, actor string, waiting bool) (requested, cancelled int64, err error) {
	actor = cut(actor, maxActor)
	if waiting {
		set := `state = 'cancelled', finished_at = {now}, start_by = NULL,
  history = ` + historyLine(s.d, s.d.TextParam(), noTime, s.d.TextParam())
		args := append([]any{"\t", actor}, historySeps()[1:]...)
		args = append(args, historySuffix(StateCancelled, 0, ""))
		cancelled, err = updateWhere(ctx, s, nil, fmt.Sprintf("cancel the waiting jobs of queue %q", queue), jobsByID, set, args,
			"state = 'ready' AND queue = ?", []any{queue})
		if err != nil {
			return 0, 0, err
		}
	}
	requested, err = updateWhere(ctx, s, nil, fmt.Sprintf("request cancel of the running jobs of queue %q", queue), jobsByID,
		"cancel_requested_by = ?, cancel_requested_at = {now}", []any{oneLine(actor)},
		"state = 'running' AND queue = ? AND cancel_requested_at IS NULL", []any{queue})
	if err != nil {
		return 0, cancelled, err
	}
	return requested, cancelled, nil
}
