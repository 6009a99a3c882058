package jobs

import (
	"context"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
	"github.com/slotpoller/slotpoller/internal/store"
)

// A completer writes the results of a node's calls in batches: calls that
// end while a batch is being written (or within Options.FinishWindow of
// the first) go together in the next statement, one multi-row UPDATE
// fenced row by row by id and token. A busy node then records many
// results per statement; an idle one writes each at once. While the node
// knows of due work, the batch also carries the claim Refill would send
// for the room it makes, where the database joins them in one statement
// (store.FusesFinishAndClaim): a busy node sends one statement per round
// of its calls, not two.

// DefaultFinishWindow is the node's Options.FinishWindow: short beside a
// call, long enough that calls ending together share a statement.
const DefaultFinishWindow = 5 * time.Millisecond

// finishing is one call's result waiting to be written.
type finishing struct {
	f    store.Finish
	done chan finished
	res  finished // its answer, when a claim carried it (claimWithResults)
}

type finished struct {
	ok  bool
	err error
}

// complete hands one result to the completer and waits for the batch that
// carries it, or for ctx.
func (r *Runner) complete(ctx context.Context, f store.Finish) (bool, error) {
	w := &finishing{f: f, done: make(chan finished, 1)}
	r.fmu.Lock()
	r.pending = append(r.pending, w)
	start := !r.completing
	r.completing = true
	r.fmu.Unlock()
	if start {
		go r.completeLoop()
	}
	select {
	case res := <-w.done:
		return res.ok, res.err
	case <-ctx.Done():
		// The batch may still write it: as with any write whose answer is
		// lost, the renewals find out.
		return false, ctx.Err()
	}
}

// completeLoop writes batches until none is waiting, then ends (the next
// result starts it again).
func (r *Runner) completeLoop() {
	// waited: the loop waited for a note's claim to carry what is pending,
	// and no claim has carried results since (carried was mark then).
	waited, mark := false, int64(0)
	for {
		if r.opts.FinishWindow > 0 {
			_ = clock.Sleep(context.Background(), r.opts.Clock, r.opts.FinishWindow)
		}
		if waited && r.carried.Load() != mark {
			waited = false // a claim took them: what is pending came after it
		}
		if wait := r.noteClaimIn(); wait > 0 && !waited {
			// The claim takes them (takePending): the completer finds none
			// left, or those that came after it.
			waited, mark = true, r.carried.Load()
			_ = clock.Sleep(context.Background(), r.opts.Clock, wait)
			continue
		}
		waited = false
		r.fmu.Lock()
		n := min(len(r.pending), store.MaxFinishBatch)
		batch := r.pending[:n:n]
		r.pending = r.pending[n:]
		if n == 0 {
			r.completing = false
			r.pending = nil
			r.fmu.Unlock()
			return
		}
		r.fmu.Unlock()
		fs := make([]store.Finish, n)
		for i, w := range batch {
			fs[i] = w.f
		}
		if r.finishAndClaim(batch, fs) {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.statementTimeout())
		oks, err := r.store.JobsFinish(ctx, fs)
		cancel()
		r.finishes.Add(1)
		for i, w := range batch {
			res := finished{err: err}
			if err == nil {
				res.ok = oks[i]
			}
			w.done <- res
		}
	}
}

// noteClaimIn is how long until Refill may claim for a note (Due) again,
// when it claimed for one less than a cooldown ago, the claim may carry
// results and the node has room for it; zero otherwise. Under a steady
// stream of enqueues the next note comes within the cooldown, and results
// that wait for its claim ride on it rather than go alone a few
// milliseconds before it: a node's calls end between two notes' claims,
// and written alone each round of calls cost two statements, not one.
// The results wait at most a cooldown (Options.PushCooldown) longer, once
// per batch: if no note came, or its claim did not take them, they go
// alone after it.
func (r *Runner) noteClaimIn() time.Duration {
	if !r.refilling.Load() || !r.fusesResults() {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.push.last.IsZero() || len(r.inflight) >= r.opts.Capacity {
		return 0
	}
	return r.push.last.Add(r.opts.PushCooldown).Sub(clock.Mono(r.opts.Clock))
}

// finish writes the outcome, retrying while the database is unreachable
// for up to within. The first try has no deadline of its own (the
// completer bounds its statement), so that the common case costs no
// timer: a busy node finishes thousands of calls a second.
func (r *Runner) finish(c store.Claim, o store.Outcome, within time.Duration) (bool, error) {
	until := time.Now().Add(within)
	f := store.Finish{ID: c.ID, Token: c.Token, Outcome: o}
	ok, err := r.complete(context.Background(), f)
	if err == nil {
		return ok, nil
	}
	ctx, cancel := context.WithDeadline(context.Background(), until)
	defer cancel()
	pause := 100 * time.Millisecond
	for {
		if clock.Sleep(ctx, r.opts.Clock, pause) != nil {
			return false, err
		}
		pause = min(2*pause, 2*time.Second)
		ok, err = r.complete(ctx, f)
		if err == nil || ctx.Err() != nil {
			return ok, err
		}
	}
}

// finishAndClaim records batch (its results fs) in the statement that
// claims what Refill would claim once these calls are recorded, and
// reports whether it did. It does not when the database cannot join them,
// when the node knows of no due work or may not claim more of it
// (Refill's rules, nextRefill, but for the cooldown), when the node
// drains, or when the claim would be a managed one: the batch is then
// written alone. A claim under way is waited for (a statement, bounded
// like every other): it took the room there was, and the room these
// results make is what the next claim takes. Written alone at once, they
// would cost a statement of their own and that claim another (at 1,000
// calls a node, a third of the results went so).
func (r *Runner) finishAndClaim(batch []*finishing, fs []store.Finish) bool {
	// Only while Refill runs: the claim is Refill's, sent early; a node
	// that stops claiming (its loops ended, it left the farm) records its
	// results alone.
	if !r.refilling.Load() || !r.fusesResults() {
		return false
	}
	r.claimMu.Lock()
	if !r.refilling.Load() || !r.fusesResults() {
		r.claimMu.Unlock()
		return false
	}
	// No cooldown: Refill waits one so that a claim takes the room of
	// several calls in one statement, and this claim costs none of its own.
	now := clock.Mono(r.opts.Clock)
	roomSince := now.Add(-r.opts.RefillCooldown)
	want := 0
	if !r.draining.Load() {
		want, _ = r.nextRefillFreeing(now, &roomSince, r.stillRunning(batch))
	}
	if want == 0 {
		r.claimMu.Unlock()
		return false
	}
	started, err := r.claimWithResults(batch, fs, want)
	r.refilled(want, started, err)
	r.claimMu.Unlock()
	if err != nil {
		r.opts.Logger.Warn("recording results and claiming again failed; waiting for the next turn", "err", err)
	} else {
		r.opts.Logger.Debug("recorded results and claimed again", "results", len(fs), "asked", want, "claimed", len(started))
	}
	for _, f := range started {
		r.start(f)
	}
	r.deliver(batch)
	// A backlog to tell the farm of is Refill's to send, on its own
	// deadline: the completer sends nothing but batches.
	r.nudge()
	return true
}

// stillRunning counts the calls of batch still in flight: the room their
// results make. A result whose call gave up waiting for its batch (the
// database was away) has left the calls in flight already.
func (r *Runner) stillRunning(batch []*finishing) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, w := range batch {
		if _, ok := r.inflight[store.Held{ID: w.f.ID, Token: w.f.Token}]; ok {
			n++
		}
	}
	return n
}

// fusesResults says whether a claim of Refill's may carry the results
// waiting for the completer, and a batch of results Refill's claim: where
// the database joins them, and the claim is the plain one.
func (r *Runner) fusesResults() bool {
	return r.store.FusesFinishAndClaim() && !r.opts.PushManaged && !r.managed.Load() && !r.draining.Load()
}

// takePending takes the results waiting for the completer's next batch,
// for a claim to carry: the completer then finds fewer, or none.
func (r *Runner) takePending() ([]*finishing, []store.Finish) {
	r.fmu.Lock()
	n := min(len(r.pending), store.MaxFinishBatch)
	batch := r.pending[:n:n]
	r.pending = r.pending[n:]
	r.fmu.Unlock()
	if n > 0 {
		r.carried.Add(1)
	}
	fs := make([]store.Finish, n)
	for i, w := range batch {
		fs[i] = w.f
	}
	return batch, fs
}

// claimWithResults claims want jobs in the statement that records batch,
// and keeps each result's answer for deliver. r.claimMu is held.
func (r *Runner) claimWithResults(batch []*finishing, fs []store.Finish, want int) ([]*inflight, error) {
	var written []bool
	started, err := r.claimWith(context.Background(), func(ctx context.Context) ([]store.Claim, error) {
		oks, claims, err := r.store.JobsFinishAndClaim(ctx, fs, r.opts.Incarnation, r.opts.Node, want, r.hold())
		written = oks
		return claims, err
	})
	r.finishes.Add(1)
	for i, w := range batch {
		w.res = finished{err: err}
		if written != nil {
			// The results were written even if the claim's rows could not
			// all be set aside (the claim's error, a doubt).
			w.res = finished{ok: written[i]}
		}
	}
	return started, err
}

// deliver hands each result of a batch written with a claim to its call.
// The claim's new calls start first: a drain that waits for the calls in
// flight never sees none between them.
func (r *Runner) deliver(batch []*finishing) {
	for _, w := range batch {
		w.done <- w.res
	}
}
