// Package jobs is slotpoller's queue at work on one node: in the node's
// slot it reclaims expired leases, claims its fair share of due jobs with a
// conditional UPDATE, calls each job's endpoint on the node's own base URL,
// keeps the leases of running calls alive in one statement per interval, and
// records each result fenced by the claim's token.
//
// Safety rests on the claim and the token, never on timing: a node that
// lost its lease (froze, lost the database) can no longer write the job.
// Each call also has a watchdog on the node's monotonic clock that cuts it
// off shortly before its lease, as last confirmed, would run out: a failed
// renewal cancels nothing by itself, and no claim or database stall can
// keep a call running past its lease. A claim that failed may have
// committed unseen; the next renewal round gives such jobs back unrun.
//
// One concept per file. Jobs: runner.go (the Runner and its options),
// poll.go (a turn's reclaim, count and claim), fairshare.go (how much of
// the due work a turn takes), refill.go (claims between turns while work is
// due), inflight.go (a call from its claim to its recorded result, and the
// watchdog that cuts it off), lease.go (the renewal of running calls'
// leases), drain.go (the stop), startnow.go and enqueue.go (the node's own
// doors), complete.go (recording results in batches), invoke.go (the HTTP
// call), verdict.go (what an answer means), backoff.go (when a failed job
// is tried again). Tasks: tasks.go (the Keeper and its workers), balance.go (spreading
// tasks over the members). Schedules: schedules.go and firetime.go.
package jobs
