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
// results per statement; an idle one writes each at once.

// DefaultFinishWindow is the node's Options.FinishWindow: short beside a
// call, long enough that calls ending together share a statement.
const DefaultFinishWindow = 5 * time.Millisecond

// finishing is one call's result waiting to be written.
type finishing struct {
	f    store.Finish
	done chan finished
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
	for {
		if r.opts.FinishWindow > 0 {
			_ = clock.Sleep(context.Background(), r.opts.Clock, r.opts.FinishWindow)
		}
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
