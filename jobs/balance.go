package jobs

import (
	"context"
	"errors"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
)

// Member is a live node as the balancer sees it.
type Member struct {
	Name        string
	Incarnation string
	Capacity    int
}

// BalanceResult says what one balancing step did.
type BalanceResult struct {
	Assigned     int
	AssignedToMe int
	// GivenTo are the other members given a task, by incarnation, each
	// once: they may be told at once (a note) rather than find out later.
	GivenTo       []string
	HandoffAsked  string // task asked to move, if any
	DeletesClosed int64
}

// Balance is the slot owner's task step: finish deletes whose owner is
// gone, give every unowned task to the live node with the most room
// (tasks per capacity), and, at most one at a time, ask an owner above its
// share to hand a task off — only when the move strictly evens the farm
// and only a task held for MinHold, so tasks do not flap.
//
// With clockStepped (the database clock was seen to step lately), a task
// whose lease looks run out is left to its owner: the lease was written
// on the clock as it read before the step, and its owner renews it on the
// clock as it reads now within a heartbeat. Deletes are not finished then
// either. New and released tasks are still given out.
func (k *Keeper) Balance(ctx context.Context, members []Member, ttl time.Duration, clockStepped bool) (BalanceResult, error) {
	var res BalanceResult
	if !clockStepped {
		n, err := k.store.TasksFinishOrphanedDeletes(ctx)
		if err != nil {
			return res, err
		}
		res.DeletesClosed = n
	}
	if len(members) == 0 {
		return res, nil
	}
	tasks, err := k.store.Tasks(ctx, false)
	if err != nil {
		return res, err
	}
	load := map[string]int{}
	for _, m := range members {
		load[m.Incarnation] = 0
	}
	var unowned []store.Task
	for _, t := range tasks {
		switch {
		case t.State == store.TaskRunning && !t.Held && clockStepped:
			// Its lease may only look run out: left to its owner.
		case t.State == store.TaskCreated, t.State == store.TaskRunning && !t.Held:
			unowned = append(unowned, t)
		case t.Held:
			if _, live := load[t.Owner]; live {
				load[t.Owner]++
			}
		}
	}
	// A member whose own task leases ran out is not renewing them: it froze
	// or lost its database, though the registry may count it live until its
	// promise ends. It gets no task until it renews again.
	dead := map[string]bool{} // members the database no longer counts live, or that stopped renewing
	for _, t := range unowned {
		if t.State == store.TaskRunning && t.Owner != "" {
			dead[t.Owner] = true
		}
	}
	// One task that cannot be assigned (a row no door wrote) must not keep
	// the others from their owners: its error is kept for the end.
	var failed error
	for _, t := range unowned {
		refused := maps.Clone(dead)
		// A dead owner's task goes to this node first where no note can
		// wake another one: it is called again now, not at the receiver's
		// turn a rotation later; rebalancing spreads it afterwards.
		takeOver := k.opts.TakeOverOrphans && t.State == store.TaskRunning && t.Owner != ""
		for {
			m, ok := emptiestExcept(members, load, refused)
			if self, in := memberOf(members, k.opts.Incarnation); takeOver && in && !refused[self.Incarnation] {
				m, ok = self, true
			}
			if !ok {
				break
			}
			ok, err := k.store.TaskAssignIfUnowned(ctx, t.Name, m.Incarnation, m.Name, k.hold(), ttl)
			if err != nil {
				if ctx.Err() != nil {
					return res, err
				}
				failed = errors.Join(failed, err)
				break
			}
			if ok {
				load[m.Incarnation]++
				res.Assigned++
				if m.Incarnation == k.opts.Incarnation {
					res.AssignedToMe++
				} else if !slices.Contains(res.GivenTo, m.Incarnation) {
					res.GivenTo = append(res.GivenTo, m.Incarnation)
				}
				break
			}
			// Refused: the task was taken meanwhile, or this member just
			// stopped being live (its membership entry is older than the
			// database's view). Try the task with the next member only if
			// it is still unowned.
			cur, err := k.store.TaskGet(ctx, t.Name)
			if err != nil {
				return res, err
			}
			if cur.State != store.TaskCreated && !(cur.State == store.TaskRunning && !cur.Held) {
				break
			}
			if cur.Token == math.MaxInt64 {
				break // no new token can fence it: refused by every member alike
			}
			refused[m.Incarnation], dead[m.Incarnation] = true, true
		}
	}
	if failed != nil {
		return res, failed
	}
	for _, t := range tasks {
		if t.Handoff && t.Held {
			return res, nil // one move at a time
		}
	}
	from, to, move := uneven(members, load)
	if !move {
		return res, nil
	}
	var pick *store.Task
	for i, t := range tasks {
		if t.Owner == from.Incarnation && t.Held && t.State == store.TaskRunning && t.HeldFor >= k.opts.MinHold {
			if pick == nil || t.HeldFor > pick.HeldFor {
				pick = &tasks[i]
			}
		}
	}
	if pick == nil {
		return res, nil
	}
	ok, err := k.store.TaskRequestHandoff(ctx, pick.Name, pick.Token)
	if err != nil {
		return res, err
	}
	if ok {
		res.HandoffAsked = pick.Name
		k.opts.Logger.Info("rebalancing: asked a node to hand a task off", "task", pick.Name, "from", from.Name, "towards", to.Name)
	}
	return res, nil
}

// emptiest is the member with the lowest load per capacity (ties: name).
// Uneven reports whether moving one task would even the members out, by
// the tasks each holds (load, by incarnation): the balancer's own test,
// for a turn to tell whether balancing has anything to do.
func Uneven(members []Member, load map[string]int) bool {
	_, _, move := uneven(members, load)
	return move
}

// uneven returns the members to move a task from and towards, and whether
// the move strictly evens things out: load_from/cap_from > (load_to+1)/cap_to.
func uneven(members []Member, load map[string]int) (from, to Member, move bool) {
	if len(members) == 0 {
		return from, to, false
	}
	from, to = fullest(members, load), emptiest(members, load)
	return from, to, from.Incarnation != to.Incarnation && load[from.Incarnation]*to.Capacity > (load[to.Incarnation]+1)*from.Capacity
}

func emptiest(members []Member, load map[string]int) Member {
	m, _ := emptiestExcept(members, load, nil)
	return m
}

func emptiestExcept(members []Member, load map[string]int, skip map[string]bool) (Member, bool) {
	var best Member
	found := false
	for _, m := range members {
		if skip[m.Incarnation] {
			continue
		}
		if !found || load[m.Incarnation]*best.Capacity < load[best.Incarnation]*m.Capacity {
			best, found = m, true
		}
	}
	return best, found
}

// memberOf returns the member of the incarnation, if it is one.
func memberOf(members []Member, incarnation string) (Member, bool) {
	for _, m := range members {
		if m.Incarnation == incarnation {
			return m, true
		}
	}
	return Member{}, false
}

// fullest is the member with the highest load per capacity (ties: name).
func fullest(members []Member, load map[string]int) Member {
	best := members[0]
	for _, m := range members[1:] {
		if load[m.Incarnation]*best.Capacity > load[best.Incarnation]*m.Capacity {
			best = m
		}
	}
	return best
}
