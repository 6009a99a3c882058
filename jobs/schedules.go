package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
)

// maxOccurrencesPerStep bounds how many occurrences one materializing step
// writes for one schedule (misfire "all" after a long outage catches up over
// several slots instead of in one burst).
const maxOccurrencesPerStep = 1000

// CompileSchedule checks a schedule's definition and compiles its timing.
func CompileSchedule(sc store.Schedule) (*FireTimes, error) {
	if err := ValidateName("schedule", sc.Name); err != nil {
		return nil, err
	}
	ft, err := CompileFireSpec(FireSpec{Every: sc.Every, Cron: sc.Cron, TimeZone: sc.TimeZone})
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", sc.Name, err)
	}
	if err := ValidateEndpoint(sc.Endpoint); err != nil {
		return nil, fmt.Errorf("schedule %q: %w", sc.Name, err)
	}
	switch sc.Method {
	case "GET", "POST", "PUT", "PATCH", "DELETE":
	default:
		return nil, fmt.Errorf("schedule %q: method %q is not one of GET, POST, PUT, PATCH, DELETE", sc.Name, sc.Method)
	}
	switch sc.Misfire {
	case store.MisfireOnce, store.MisfireSkip, store.MisfireAll:
	default:
		return nil, fmt.Errorf("schedule %q: misfire %q is not one of once, skip, all", sc.Name, sc.Misfire)
	}
	switch sc.Overlap {
	case store.OverlapForbid, store.OverlapAllow:
	default:
		return nil, fmt.Errorf("schedule %q: overlap %q is not one of forbid, allow", sc.Name, sc.Overlap)
	}
	if sc.Tolerance <= 0 {
		return nil, fmt.Errorf("schedule %q: tolerance %v must be positive", sc.Name, sc.Tolerance)
	}
	if sc.MaxAttempts < 1 {
		return nil, fmt.Errorf("schedule %q: max attempts %d must be at least 1", sc.Name, sc.MaxAttempts)
	}
	if sc.Timeout < 0 {
		return nil, fmt.Errorf("schedule %q: timeout %v must not be negative", sc.Name, sc.Timeout)
	}
	return ft, nil
}

// AddSchedule validates and adds a schedule; its first occurrence is the
// first fire time after the database's now.
func AddSchedule(ctx context.Context, s *store.Store, sc store.Schedule) error {
	ft, err := CompileSchedule(sc)
	if err != nil {
		return err
	}
	now, err := s.Now(ctx)
	if err != nil {
		return err
	}
	return s.ScheduleInsert(ctx, sc, ft.Next(now))
}

// PutSchedule creates a schedule or brings an existing one in line with sc
// (config as code). Its next occurrence moves only when its timing changed.
// It says what it did: "created", "updated" or "unchanged".
func PutSchedule(ctx context.Context, s *store.Store, sc store.Schedule) (string, error) {
	ft, err := CompileSchedule(sc)
	if err != nil {
		return "", err
	}
	cur, err := s.ScheduleGet(ctx, sc.Name)
	if errors.Is(err, store.ErrNotFound) {
		now, err := s.Now(ctx)
		if err != nil {
			return "", err
		}
		if err := s.ScheduleInsert(ctx, sc, ft.Next(now)); err != nil && !errors.Is(err, store.ErrDuplicate) {
			return "", err
		}
		return "created", nil // or created by a node starting at the same time
	}
	if err != nil {
		return "", err
	}
	// The config can disable a schedule, but a schedule it declares enabled
	// stays as an operator left it: a `schedule pause` survives restarts.
	if sc.Enabled {
		sc.Enabled = cur.Enabled
	}
	sameTiming := cur.Every == sc.Every && cur.Cron == sc.Cron && cur.TimeZone == sc.TimeZone
	if sameTiming && cur.Endpoint == sc.Endpoint && cur.Method == sc.Method && string(cur.Payload) == string(sc.Payload) &&
		cur.Timeout == sc.Timeout && cur.MaxAttempts == sc.MaxAttempts && cur.Tolerance == sc.Tolerance &&
		cur.Misfire == sc.Misfire && cur.Overlap == sc.Overlap && cur.Enabled == sc.Enabled && cur.Source == sc.Source {
		return "unchanged", nil
	}
	var next *time.Time
	if !sameTiming || (sc.Enabled && !cur.Enabled) {
		now, err := s.Now(ctx)
		if err != nil {
			return "", err
		}
		n := ft.Next(now)
		next = &n
	}
	if _, err := s.ScheduleUpdate(ctx, sc, next); err != nil {
		return "", err
	}
	return "updated", nil
}

// ResumeSchedule re-enables a paused schedule from its next fire time after
// now: a pause is not an outage, so nothing it skipped counts as missed.
func ResumeSchedule(ctx context.Context, s *store.Store, name string) error {
	cur, err := s.ScheduleGet(ctx, name)
	if err != nil {
		return err
	}
	ft, err := CompileSchedule(cur)
	if err != nil {
		return err
	}
	now, err := s.Now(ctx)
	if err != nil {
		return err
	}
	if cur.Enabled {
		return nil // not paused: resuming must not skip a backlog uncounted
	}
	next := ft.Next(now)
	_, err = s.ScheduleSetEnabled(ctx, name, true, &next)
	return err
}

// occurrence is the job of one of sc's occurrences, firing at fire and
// to be started by startBy (nil: however late), under key.
func occurrence(sc store.Schedule, fire time.Time, startBy *time.Time, key string) store.NewJob {
	return store.NewJob{Endpoint: sc.Endpoint, Method: sc.Method, Payload: sc.Payload, RunAt: &fire,
		MaxAttempts: sc.MaxAttempts, Timeout: sc.Timeout, UniqueKey: key, IdempotencyKey: key,
		Schedule: sc.Name, ScheduledFor: &fire, StartBy: startBy, Exclusive: sc.Overlap == store.OverlapForbid}
}

// PauseSchedule stops a schedule's occurrences: once it returns, no node
// writes another (the materializer's advance is fenced by the schedule
// being enabled). Occurrences already written still run.
func PauseSchedule(ctx context.Context, s *store.Store, name string) error {
	ok, err := s.ScheduleSetEnabled(ctx, name, false, nil)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("schedule %q: %w", name, store.ErrNotFound)
	}
	return nil
}

// TriggerSchedule adds one occurrence of a schedule now, beside its grid
// (which it does not move): the operator's "run it now". The occurrence
// fires at the database's now and is a job like the others (same
// endpoint, payload, attempts, tolerance, overlap rule), under a unique
// key of its own, (schedule, "manual", fire time), so it exists once (a
// second trigger within the same millisecond fires a millisecond later). It
// is written in one transaction with a lock on the schedule's row, so a
// removal either comes first (then nothing is written) or cancels it. A
// paused schedule may be triggered: pausing stops the grid, not the
// operator. It returns the occurrence's job id.
func TriggerSchedule(ctx context.Context, s *store.Store, name string) (int64, error) {
	sc, err := s.ScheduleGet(ctx, name)
	if err != nil {
		return 0, err
	}
	if _, err := CompileSchedule(sc); err != nil {
		return 0, err
	}
	now, err := s.Now(ctx)
	if err != nil {
		return 0, err
	}
	fire := now.UTC().Truncate(time.Millisecond) // what every database keeps
	var by *time.Time
	if sc.Misfire != store.MisfireAll {
		b := fire.Add(sc.Tolerance)
		by = &b
	}
	// Two triggers within one millisecond of database time are two
	// occurrences: the later one fires a millisecond on.
	for range 100 {
		key := "slotpoller-schedule:" + name + ":manual:" + fire.Format(time.RFC3339Nano)
		id, err := s.ScheduleTrigger(ctx, name, occurrence(sc, fire, by, key))
		if !errors.Is(err, store.ErrDuplicate) {
			return id, err
		}
		fire = fire.Add(time.Millisecond)
		if by != nil {
			b := by.Add(time.Millisecond)
			by = &b
		}
	}
	return 0, fmt.Errorf("trigger schedule %q now: a hundred manual occurrences within 100 ms: %w", name, store.ErrDuplicate)
}

// occurrenceKey names an occurrence: the unique key that makes it exist
// once, and the Idempotency-Key its calls carry.
func occurrenceKey(schedule string, fire time.Time) string {
	return "slotpoller-schedule:" + schedule + ":" + fire.UTC().Format(time.RFC3339Nano)
}

// MaterializeResult says what one materializing step did.
type MaterializeResult struct {
	Schedules int // due schedules seen
	Created   int // occurrences written as jobs
	Missed    int // occurrences recorded as missed by their misfire policy
}

// Materialize is the slot owner's schedule step: every enabled schedule
// whose next occurrence falls before now+lookahead gets its occurrences
// written as jobs under their unique keys (so each exists once however many
// nodes race), its misfire policy applied to those it can no longer start
// within tolerance, and is advanced past them.
func Materialize(ctx context.Context, s *store.Store, lookahead time.Duration, log *slog.Logger) (MaterializeResult, error) {
	return materialize(ctx, s, lookahead, false, log)
}

// MaterializeAcrossStep is Materialize while the database clock is seen to
// have stepped lately: the fire times a step ahead jumped over were never
// passed by the farm (no time went by for them), so they are neither run
// nor counted as missed; the schedules go on from their first occurrence
// that can still start in time, as after a resume. A step is not an
// outage.
func MaterializeAcrossStep(ctx context.Context, s *store.Store, lookahead time.Duration, log *slog.Logger) (MaterializeResult, error) {
	return materialize(ctx, s, lookahead, true, log)
}

func materialize(ctx context.Context, s *store.Store, lookahead time.Duration, stepped bool, log *slog.Logger) (MaterializeResult, error) {
	due, now, err := s.SchedulesDue(ctx, lookahead)
	if err != nil {
		return MaterializeResult{}, err
	}
	return materializeDue(ctx, s, due, now, lookahead, stepped, log)
}

// materializeDue writes the occurrences of schedules read as due at now.
func materializeDue(ctx context.Context, s *store.Store, due []store.Schedule, now time.Time, lookahead time.Duration, stepped bool, log *slog.Logger) (MaterializeResult, error) {
	res := MaterializeResult{Schedules: len(due)}
	for _, sc := range due {
		ft, err := CompileSchedule(sc)
		if err != nil {
			log.Error("schedule cannot be run; fix or remove it", "schedule", sc.Name, "err", err)
			continue
		}
		created, missed, err := materializeOne(ctx, s, sc, ft, now, lookahead, stepped)
		res.Created += created
		res.Missed += missed
		if err != nil {
			// One schedule's trouble must not hold up the others: it is
			// tried again next turn, and its occurrences exist once anyway.
			if ctx.Err() != nil {
				return res, err
			}
			log.Error("could not write schedule occurrences; trying again next turn", "schedule", sc.Name, "err", err)
			continue
		}
		if missed > 0 {
			log.Warn("schedule occurrences missed", "schedule", sc.Name, "missed", missed, "misfire", sc.Misfire)
		}
	}
	return res, nil
}

func materializeOne(ctx context.Context, s *store.Store, sc store.Schedule, ft *FireTimes, now time.Time, lookahead time.Duration, stepped bool) (int, int, error) {
	if sc.NextFireAt == nil {
		return 0, 0, nil
	}
	first := *sc.NextFireAt
	fires, more := ft.Between(first.Add(-time.Nanosecond), now.Add(lookahead), maxOccurrencesPerStep)
	if len(fires) == 0 {
		return 0, 0, nil
	}
	late := func(f time.Time) bool { return f.Add(sc.Tolerance).Before(now) }
	var run []time.Time
	var startBy []time.Time
	missed := 0
	next := ft.Next(fires[len(fires)-1])
	switch {
	case stepped:
		// Late only by the step: skipped uncounted, whatever the policy.
		for _, f := range fires {
			if late(f) {
				continue
			}
			run = append(run, f)
			if sc.Misfire == store.MisfireAll {
				startBy = append(startBy, time.Time{}) // however late
			} else {
				startBy = append(startBy, f.Add(sc.Tolerance))
			}
		}
		if jump := ft.Next(now.Add(-sc.Tolerance)); more && jump.After(next) {
			next = jump
		}
	case sc.Misfire == store.MisfireAll:
		// Every occurrence runs, however late: none has a start_by to miss.
		run = fires
		startBy = make([]time.Time, len(fires))
	default: // once, skip
		var latestLate time.Time
		for _, f := range fires {
			if late(f) {
				missed++
				latestLate = f
				continue
			}
			run = append(run, f)
			startBy = append(startBy, f.Add(sc.Tolerance))
		}
		if more && late(fires[len(fires)-1]) {
			// A long outage: the step saw only the first occurrences, all
			// late. Jump to the first one that can still start in time,
			// never back before what this step already covered.
			if l := ft.Latest(fires[len(fires)-1], now.Add(-sc.Tolerance)); !l.IsZero() {
				latestLate = l
				missed++ // at least one more; the rest are not counted one by one
			}
			if jump := ft.Next(now.Add(-sc.Tolerance)); jump.After(next) {
				next = jump
			}
		}
		if sc.Misfire == store.MisfireOnce && !latestLate.IsZero() {
			missed--
			run = append([]time.Time{latestLate}, run...)
			startBy = append([]time.Time{now.Add(sc.Tolerance)}, startBy...)
		}
	}
	occurrences := make([]store.NewJob, len(run))
	for i, f := range run {
		fire := f
		var by *time.Time
		if !startBy[i].IsZero() {
			by = &startBy[i]
		}
		occurrences[i] = occurrence(sc, fire, by, occurrenceKey(sc.Name, fire))
	}
	var lastFire *time.Time
	if len(run) > 0 {
		lastFire = &run[len(run)-1]
	}
	// Written with the advance, or not at all: a schedule removed, paused
	// or advanced by another slot owner since it was read gets nothing.
	created, ok, err := s.ScheduleMaterialize(ctx, sc.Name, sc.Version, occurrences, next, lastFire, int64(missed))
	if err != nil {
		return 0, 0, err
	}
	if !ok {
		missed = 0 // another node advanced it and counted, or it was stopped
	}
	return created, missed, nil
}
