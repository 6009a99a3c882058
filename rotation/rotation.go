// Package rotation cuts database time into slots and tells a node when its
// turn to poll the queue comes.
//
// Slot k = floor(dbNow / L) belongs to live[k mod N], the live nodes sorted
// by name. Each node sleeps until its own slot (converted to local time
// through its measured offset, plus a guard of the offset's error bound) and
// polls only then, so the farm polls about once per L whatever N is.
//
// Under backlog the rotation widens: every node gets a turn in every slot,
// spread through it by rank (the slot's owner first), until the backlog
// drains. A node that has just heard of the backlog takes its turn of the
// current slot at once, so that a burst found by the slot's owner has every
// node claiming within milliseconds, and its place in that slot as well if
// that is still ahead, so that the farm goes on polling through the slot.
// Rotation only shapes load; the
// conditional claim keeps it safe when two nodes briefly disagree about
// membership.
package rotation

import (
	"context"
	"time"

	"github.com/slotpoller/slotpoller/internal/clock"
)

// Slot returns the number of the slot that db falls in.
func Slot(db time.Time, length time.Duration) int64 {
	return floorDiv(db.UnixNano(), int64(length))
}

// Start returns the database time at which slot k begins.
func Start(k int64, length time.Duration) time.Time {
	return time.Unix(0, k*int64(length)).UTC()
}

// Owner returns the node that slot k belongs to; members must be sorted.
func Owner(k int64, members []string) string {
	if len(members) == 0 {
		return ""
	}
	return members[mod(k, int64(len(members)))]
}

// Rank is a node's place in slot k: 0 for the slot's owner, then 1, 2, ...
// for the nodes after it in the rotation. It is -1 for a non-member.
func Rank(k int64, me string, members []string) int {
	for i, m := range members {
		if m == me {
			return int(mod(int64(i)-k, int64(len(members))))
		}
	}
	return -1
}

// Turn is one poll a node may make.
type Turn struct {
	Slot  int64
	Rank  int       // 0: the slot's owner; >0: a widened turn
	Start time.Time // database time the turn began
}

// DBClock is the node's estimate of the database clock (clocksync's
// Estimator): the database time now, its error bound, and whether an
// estimate exists yet.
type DBClock interface {
	Now() (db time.Time, errBound time.Duration, ok bool)
}

// Waiter hands a node its turns.
type Waiter struct {
	Clock   clock.Clock     // local timers
	DB      DBClock         // database time
	Slot    time.Duration   // L
	Me      string          // this node's name
	Members func() []string // live members, sorted, as last read
	Widen   func() bool     // true while the farm is in backlog mode; nil means never
	Nudge   <-chan struct{} // wakes a sleeping Wait to re-read membership; may be nil
	last    int64
	started bool
	// widened is whether the last look at the rotation found it widened;
	// prompt, that it widened in slot promptSlot and this node has not
	// taken a turn since: its turn of that slot is due at once.
	widened, prompt bool
	promptSlot      int64
	// again: the last turn was a prompt one, taken before this node's
	// place in that slot, and the place is still to come: the node takes
	// its turn there too. Where nodes hear of a backlog at once, every
	// node's prompt turn comes at the same moment; had they spent their
	// places with it, nobody would poll for the rest of the slot, and work
	// enqueued meanwhile would wait for the next slot.
	again bool
}

// Wait blocks until this node's next turn and returns it. It skips turns it
// woke up too late for, and does not return a slot twice unless the
// database time goes back by more than a slot (see forgetFutureTurn). Sleeps
// are capped at one slot, so a change of membership or mode, or a step of
// the database time, is noticed within one slot even without a nudge.
func (w *Waiter) Wait(ctx context.Context) (Turn, error) {
	for {
		if err := ctx.Err(); err != nil {
			return Turn{}, err
		}
		sleep := w.Slot
		db, errBound, ok := w.DB.Now()
		// A guard band of half a slot or more would leave no moment that is
		// surely inside the slot, and the node would never poll. Past a
		// quarter slot the guard stops growing: polling a little early or
		// late costs fairness, never safety (the claim is conditional).
		errBound = min(errBound, w.Slot/4)
		if ok {
			w.forgetFutureTurn(db.Add(-errBound))
			turn, wait, now, placeAhead := w.next(db, errBound, w.Members())
			if now {
				w.last, w.started, w.prompt, w.again = turn.Slot, true, false, placeAhead
				return turn, nil
			}
			if wait > 0 && wait < sleep {
				sleep = wait
			}
		}
		if err := w.sleep(ctx, sleep); err != nil {
			return Turn{}, err
		}
	}
}

// forgetFutureTurn forgets the last turn once the database time (its
// earliest, safe) is more than a slot before it: the database clock stepped
// back (a failover to a host whose clock is behind) or the estimate moved.
// Waiting for that turn to come round again would silence the node for the
// length of the step; forgetting it may let the node poll a slot again, which
// is safe because the claim is conditional. Within a slot of it the turn is
// kept, so that an estimate nudged back by its error does not repeat a slot.
func (w *Waiter) forgetFutureTurn(safe time.Time) {
	if w.started && Slot(safe, w.Slot) < w.last-1 {
		w.started = false
	}
}

// next finds the node's next turn. It returns the turn and true when it is
// due now (and whether it is a prompt turn whose place in its slot is still
// ahead), or how long to wait. The guard band works on both edges: a turn
// starts only once the earliest the database time can be (db - errBound) has
// reached it, and is taken only while the latest it can be (db + errBound)
// is still inside the slot.
func (w *Waiter) next(db time.Time, errBound time.Duration, members []string) (turn Turn, wait time.Duration, now, placeAhead bool) {
	n := len(members)
	safe, late := db.Add(-errBound), db.Add(errBound)
	k := Slot(safe, w.Slot)
	if Rank(k, w.Me, members) < 0 {
		return Turn{}, 0, false, false
	}
	widen := w.Widen != nil && w.Widen()
	if widen && !w.widened {
		w.prompt, w.promptSlot = true, k
	}
	w.widened = widen
	if !widen {
		w.prompt = false
	}
	for kk := k; kk <= k+int64(n); kk++ {
		if w.started && kk <= w.last && !(w.again && kk == w.last) {
			continue
		}
		r := Rank(kk, w.Me, members)
		if r != 0 && !widen {
			continue
		}
		place := Start(kk, w.Slot).Add(time.Duration(r) * WidenedGap(w.Slot, n))
		at, prompt := place, w.prompt && kk == w.promptSlot && r != 0 && !(w.started && kk <= w.last)
		if prompt {
			at = Start(kk, w.Slot) // just heard of the backlog: now, within the slot
		}
		if safe.Before(at) {
			return Turn{}, at.Sub(safe), false, false
		}
		if late.Before(Start(kk+1, w.Slot)) {
			return Turn{Slot: kk, Rank: r, Start: at}, 0, true, prompt && safe.Before(place)
		}
		// Woke up after the slot ended (a pause, a clock jump): skip it.
	}
	return Turn{}, 0, false, false
}

// WidenedGap is how far apart the turns of a widened slot of n nodes come,
// by rank: spread through the slot, so that work that keeps arriving
// during a backlog waits a fraction of a slot, not a whole one. (Bunched
// 20 ms apart, the steady load's start delay p50 went from 153 to 479 ms
// at 4 nodes.)
func WidenedGap(slot time.Duration, n int) time.Duration {
	return slot / time.Duration(max(1, n))
}

// NextPoll is when, in database time, the farm's next poll after turn
// comes: the next rank's turn in a widened slot of n nodes, else the next
// slot's start.
func NextPoll(turn Turn, slot time.Duration, n int, widened bool) time.Time {
	if widened && turn.Rank < n-1 {
		return turn.Start.Add(WidenedGap(slot, n))
	}
	return Start(turn.Slot+1, slot)
}

func (w *Waiter) sleep(ctx context.Context, d time.Duration) error {
	t := w.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
	case <-w.Nudge:
	}
	return nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}
