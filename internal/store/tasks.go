package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Task states.
const (
	TaskCreated  = "created"  // waiting for an owner
	TaskRunning  = "running"  // held by an owner under a lease
	TaskDeleting = "deleting" // delete asked; the owner stops and confirms
	TaskDeleted  = "deleted"
)

// NewTask is an endless task to add.
type NewTask struct {
	Name     string
	Endpoint string
	Method   string
	Payload  []byte
	Every    time.Duration
	Timeout  time.Duration // 0: the node's default
}

// HeldTask is a task as its owner sees it after a lease renewal.
type HeldTask struct {
	Name     string
	Token    int64
	State    string // running or deleting
	Endpoint string
	Method   string
	Payload  []byte
	Every    time.Duration
	Timeout  time.Duration
	Handoff  bool // the farm asked the owner to hand the task off
	Failures int
}

// Task is a row of the task table as the CLI and the balancer read it.
type Task struct {
	Name       string
	Endpoint   string
	Method     string
	Every      time.Duration
	State      string
	Owner      string // incarnation
	OwnerNode  string
	Token      int64
	Held       bool // the lease is still running, by the database clock
	Since      *time.Time
	HeldFor    time.Duration // database now minus Since
	Handoff    bool
	Calls      int64
	Failures   int
	LastCallAt *time.Time
	LastStatus int
	LastError  string
}

// TaskInsert adds a task. A name in use by a task that is not deleted gives
// ErrDuplicate; a deleted task's name can be used again (its token keeps
// counting up, so fencing stays monotonic).
func (s *Store) TaskInsert(ctx context.Context, t NewTask) error {
	ins := s.statement(`INSERT INTO {tasks} (name, endpoint, method, payload, every_ms, timeout_ms, state, token, created_at)
VALUES (?, ?, ?, ?, ?, ?, 'created', 0, {now})`)
	err := s.retry(ctx, func() error {
		_, err := s.exec(ctx, ins, t.Name, t.Endpoint, t.Method, t.Payload, millis(t.Every), millis(t.Timeout))
		return err
	})
	if err == nil {
		return nil
	}
	if !s.drv.UniqueViolation(err) {
		return fmt.Errorf("add task %q: %w", t.Name, err)
	}
	reuse := s.statement(`UPDATE {tasks} SET endpoint = ?, method = ?, payload = ?, every_ms = ?, timeout_ms = ?,
  state = 'created', owner = NULL, owner_node = NULL, lease_until = NULL, since = NULL, handoff = 0, calls = 0,
  failures = 0, last_call_at = NULL, last_status = NULL, last_error = NULL, created_at = {now}, deleted_at = NULL
WHERE name = ? AND state = 'deleted'`)
	ok, err := s.fenced(ctx, "add task "+strconv.Quote(t.Name), reuse, t.Endpoint, t.Method, t.Payload, millis(t.Every), millis(t.Timeout), t.Name)
	if err != nil {
		return fmt.Errorf("add task %q: %w", t.Name, err)
	}
	if !ok {
		return fmt.Errorf("add task: a task named %q %w (delete it first)", t.Name, ErrDuplicate)
	}
	return nil
}

// TasksRenew extends, in one statement, the lease of every task the owner
// holds, and returns them: renewal is also how a node learns which tasks
// were assigned to it, which it must stop (deleting, handoff), and which it
// lost (missing from the answer).
func (s *Store) TasksRenew(ctx context.Context, owner string, hold Hold) ([]HeldTask, error) {
	q := s.statement(`UPDATE {tasks} SET lease_until = {now+hold}
  {output name, token, state, endpoint, method, payload, every_ms, timeout_ms, handoff, failures}
WHERE owner = ? AND state IN ('running', 'deleting')
{returning name, token, state, endpoint, method, payload, every_ms, timeout_ms, handoff, failures}`)
	args := append(hold.args(), owner)
	if s.writesBack() {
		// The names first, then a write by primary key (idsfirst.go):
		// through the owner's index, the renewal would lock the index's
		// entries before the rows, the order opposite to a release or an
		// assignment of one task, which changes that index. Then the tasks
		// the owner holds now.
		const held = "owner = ? AND state IN ('running', 'deleting')"
		names, err := keysOf(ctx, s, nil, "renew task leases", tasksByName, held, []any{owner})
		if err != nil || len(names) == 0 {
			return nil, err
		}
		if _, err := updateKeys(ctx, s, nil, "renew task leases", tasksByName, "lease_until = {now+hold}", hold.args(), names, held, []any{owner}); err != nil {
			return nil, err
		}
		q, args = s.statement(`SELECT name, token, state, endpoint, method, payload, every_ms, timeout_ms, handoff, failures
FROM {tasks} WHERE `+held+` ORDER BY name`), []any{owner}
	}
	return queryAll(ctx, s, "renew task leases", q, args, func(r rowScanner) (HeldTask, error) {
		var h HeldTask
		var everyMS, timeoutMS int64
		var handoff int
		err := r.Scan(&h.Name, &h.Token, &h.State, &h.Endpoint, &h.Method, &h.Payload, &everyMS, &timeoutMS, &handoff, &h.Failures)
		h.Every, h.Timeout, h.Handoff = time.Duration(everyMS)*time.Millisecond, time.Duration(timeoutMS)*time.Millisecond, handoff != 0
		return h, err
	})
}

const taskColumns = `name, endpoint, method, every_ms, state, owner, owner_node, token,
  CASE WHEN state IN ('running', 'deleting') AND lease_until > {now} THEN 1 ELSE 0 END,
  since, handoff, calls, failures, last_call_at, last_status, last_error, {now}`

func scanTask(sc rowScanner) (Task, error) {
	var t Task
	var everyMS int64
	var owner, ownerNode, lastErr sql.NullString
	var held, handoff int
	var since, lastCall, now dbTime
	var status sql.NullInt64
	if err := sc.Scan(&t.Name, &t.Endpoint, &t.Method, &everyMS, &t.State, &owner, &ownerNode, &t.Token, &held,
		&since, &handoff, &t.Calls, &t.Failures, &lastCall, &status, &lastErr, &now); err != nil {
		return t, err
	}
	t.Every = time.Duration(everyMS) * time.Millisecond
	t.Owner, t.OwnerNode, t.LastError = owner.String, ownerNode.String, lastErr.String
	t.Held, t.Handoff, t.LastStatus = held == 1, handoff != 0, int(status.Int64)
	t.Since, t.LastCallAt = since.ptr(), lastCall.ptr()
	if since.Valid {
		t.HeldFor = now.T.Sub(since.T)
	}
	return t, nil
}

// Tasks reads every task that is not deleted (all of them with
// includeDeleted), sorted by name.
func (s *Store) Tasks(ctx context.Context, includeDeleted bool) ([]Task, error) {
	q := s.statement(`SELECT ` + taskColumns + ` FROM {tasks} WHERE (state <> 'deleted' OR ? = 1) ORDER BY name`)
	return queryAll(ctx, s, "read tasks", q, []any{boolInt(includeDeleted)}, func(r rowScanner) (Task, error) { return scanTask(r) })
}

// TaskGet reads one task.
func (s *Store) TaskGet(ctx context.Context, name string) (Task, error) {
	t, err := scanTask(s.queryRow(ctx, s.statement(`SELECT `+taskColumns+` FROM {tasks} WHERE name = ?`), name))
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("task %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return t, fmt.Errorf("read task %q: %w", name, err)
	}
	return t, nil
}

// TaskAssignIfUnowned gives a task that has no owner (new, released, or
// whose owner's lease ran out) to a node, under a new token and a lease
// starting now. A task whose token is at its type's maximum (a row no door
// wrote) is refused: no new token can fence it. The target must be live by the database clock at that
// moment, so a node that just left is never given work.
func (s *Store) TaskAssignIfUnowned(ctx context.Context, name, owner, ownerNode string, hold Hold, ttl time.Duration) (bool, error) {
	q := s.statement(`UPDATE {tasks} SET state = 'running', owner = ?, owner_node = ?, token = token + 1,
  lease_until = {now+hold}, since = {now}, handoff = 0
WHERE name = ? AND (state = 'created' OR (state = 'running' AND (lease_until IS NULL OR lease_until < {now})))
  AND token < ` + strconv.FormatInt(maxToken, 10) + `
  AND EXISTS (SELECT 1 FROM {nodes} WHERE incarnation = ? AND ` + s.live("") + `)`)
	args := append(append([]any{owner, ownerNode}, hold.args()...), name, owner, -millis(ttl))
	return s.fenced(ctx, "assign task "+strconv.Quote(name), q, args...)
}

// TaskRequestHandoff asks a task's owner to release it (rebalancing). The
// owner does the releasing: a task is never taken from a live owner.
func (s *Store) TaskRequestHandoff(ctx context.Context, name string, token int64) (bool, error) {
	q := s.statement(`UPDATE {tasks} SET handoff = 1 WHERE name = ? AND token = ? AND state = 'running'`)
	return s.fenced(ctx, "request handoff of task "+strconv.Quote(name), q, name, token)
}

// TaskReleaseIfHeld gives a held task back to the farm, unowned.
func (s *Store) TaskReleaseIfHeld(ctx context.Context, name string, token int64) (bool, error) {
	q := s.statement(`UPDATE {tasks} SET state = 'created', owner = NULL, lease_until = NULL, handoff = 0
WHERE name = ? AND token = ? AND state = 'running'`)
	return s.fenced(ctx, "release task "+strconv.Quote(name), q, name, token)
}

// TasksReleaseAll gives back every task the owner holds (a graceful stop):
// running ones to the farm, deleting ones as deleted.
//
// The tasks named in keep stay held: a call of theirs may still run at its
// endpoint, and they move when their leases end.
func (s *Store) TasksReleaseAll(ctx context.Context, owner string, keep ...string) (int64, error) {
	where := "owner = ? AND state IN ('running', 'deleting')"
	args := []any{owner}
	if len(keep) > 0 {
		where += " AND name NOT IN (?" + strings.Repeat(", ?", len(keep)-1) + ")"
		for _, n := range keep {
			args = append(args, n)
		}
	}
	// The state last: deleted_at reads it (MySQL assigns left to right).
	// On MySQL the names first (idsfirst.go), as TasksRenew.
	return updateWhere(ctx, s, nil, "release tasks", tasksByName, `deleted_at = CASE WHEN state = 'deleting' THEN {now} ELSE deleted_at END,
  owner = NULL, lease_until = NULL, handoff = 0,
  state = CASE WHEN state = 'deleting' THEN 'deleted' ELSE 'created' END`, nil, where, args)
}

// TaskRecordCall records one call's result, fenced by the token.
func (s *Store) TaskRecordCall(ctx context.Context, name string, token int64, ok bool, status int, errText string) (bool, error) {
	okFlag := 0
	if ok {
		okFlag = 1
	}
	q := s.statement(`UPDATE {tasks} SET calls = calls + 1, last_call_at = {now}, last_status = ?, last_error = ?,
  failures = CASE WHEN ? = 1 THEN 0 ELSE failures + 1 END
WHERE name = ? AND token = ? AND state IN ('running', 'deleting')`)
	return s.fenced(ctx, "record call of task "+strconv.Quote(name), q, nullInt(status), nullString(errText), okFlag, name, token)
}

// TaskRequestDelete asks for a task to be deleted. A task with no owner is
// deleted at once; an owned one goes to deleting and its owner confirms.
// It returns the state the task is now in.
func (s *Store) TaskRequestDelete(ctx context.Context, name string) (string, error) {
	// The state last: deleted_at reads it (MySQL assigns left to right).
	q := s.statement(`UPDATE {tasks} SET
  deleted_at = CASE WHEN owner IS NULL OR state = 'created' THEN {now} ELSE NULL END,
  state = CASE WHEN owner IS NULL OR state = 'created' THEN 'deleted' ELSE 'deleting' END
WHERE name = ? AND state IN ('created', 'running')`)
	if _, err := s.fenced(ctx, "delete task "+strconv.Quote(name), q, name); err != nil {
		return "", fmt.Errorf("delete task %q: %w", name, err)
	}
	t, err := s.TaskGet(ctx, name)
	if err != nil {
		return "", err
	}
	return t.State, nil
}

// TaskMarkDeleted is the owner's confirmation that it stopped a deleting
// task.
func (s *Store) TaskMarkDeleted(ctx context.Context, name string, token int64) (bool, error) {
	q := s.statement(`UPDATE {tasks} SET state = 'deleted', owner = NULL, lease_until = NULL, deleted_at = {now}
WHERE name = ? AND token = ? AND state = 'deleting'`)
	return s.fenced(ctx, "confirm deletion of task "+strconv.Quote(name), q, name, token)
}

// TasksFinishOrphanedDeletes completes deletes whose owner is gone.
// On MySQL the names first (idsfirst.go): the state's index would be
// locked before the rows.
func (s *Store) TasksFinishOrphanedDeletes(ctx context.Context) (int64, error) {
	return updateWhere(ctx, s, nil, "finish deletes of orphaned tasks", tasksByName,
		"state = 'deleted', owner = NULL, lease_until = NULL, deleted_at = {now}", nil,
		"state = 'deleting' AND (owner IS NULL OR lease_until IS NULL OR lease_until < {now})", nil)
}
