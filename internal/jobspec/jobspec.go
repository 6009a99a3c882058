// Package jobspec is what a job to enqueue may be: the limits of its
// fields, the rules of its endpoint and names, and the check of a new job.
// The client and the nodes share it; it imports no database driver, so
// that an application's client compiles in none it does not use.
//
// Invariants: an endpoint that passes is a path on the node's own base URL
// (never another host, never a dot segment however it is encoded); a name
// or an idempotency key that passes is a header-safe value; a new job that
// passes CheckNewJob fits the columns that hold it.
package jobspec

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slotpoller/slotpoller/internal/store"
)

// DefaultMaxAttempts is a job's attempt budget unless it or the node's
// config says otherwise: with the default backoff (1 s doubling to 5 m)
// its retries wait at least 61 minutes, so a job outlives its web
// application being down for an hour, as in a deploy gone slow.
const DefaultMaxAttempts = 33

// NewIdempotencyKey returns a key for a new job: random, so that it stays
// the same for every attempt of the job and differs from every other job.
func NewIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "slotpoller-" + hex.EncodeToString(b)
}

// MaxNameLength is the longest schedule or task name.
const MaxNameLength = 200

// ValidateName checks the name of a schedule or a task (kind says which).
// A name travels in a request header of every call (X-Slotpoller-Task, the
// schedule's in the idempotency key), so it must be a header-safe value:
// 1 to 200 printable ASCII characters, no control character (a newline
// would make every call fail with an invalid-header error), nothing outside
// ASCII (ASP.NET Core's Kestrel refuses it) and no leading or trailing
// space (servers trim it, and the name would no longer match).
func ValidateName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%s name is empty; give 1 to %d characters", kind, MaxNameLength)
	case len(name) > MaxNameLength:
		return fmt.Errorf("%s name is %d bytes long; at most %d are allowed", kind, len(name), MaxNameLength)
	case name[0] == ' ' || name[len(name)-1] == ' ':
		return fmt.Errorf("%s name %q has a leading or trailing space", kind, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c < 0x20 || c == 0x7f:
			return fmt.Errorf("%s name %q has a control character at byte %d; names travel in request headers, which cannot carry it", kind, name, i)
		case c >= 0x80:
			r, _ := utf8.DecodeRuneInString(name[i:])
			if r == utf8.RuneError {
				return fmt.Errorf("%s name %q is not valid UTF-8 at byte %d", kind, name, i)
			}
			return fmt.Errorf("%s name %q has the non-ASCII character %q; names travel in request headers, which take printable ASCII only", kind, name, r)
		}
	}
	return nil
}

// MaxCallTimeout is the longest deadline of one endpoint call (a job's,
// a task's or a schedule's timeout); MinCallTimeout the shortest, since
// the database keeps timeouts in whole milliseconds (1ns would be stored
// as 0, which means the default).
const (
	MinCallTimeout = time.Millisecond
	MaxCallTimeout = store.MaxHeldTimeout // what a claim's hold covers
)

// ValidateTimeout checks a call timeout; 0 means the node's default.
func ValidateTimeout(d time.Duration) error {
	switch {
	case d == 0:
		return nil
	case d < 0:
		return fmt.Errorf("timeout %v must not be negative", d)
	case d < MinCallTimeout:
		return fmt.Errorf("timeout %v is below %v (timeouts are kept in milliseconds; 0 means the default)", d, MinCallTimeout)
	case d > MaxCallTimeout:
		return fmt.Errorf("timeout %v is above %v", d, MaxCallTimeout)
	}
	return nil
}

// MaxAttempts is the most attempts a job may have.
const MaxAttempts = 1000

// MaxLeadTime is how far ahead a job may be due: a run_at years away (a
// mistyped -at 9999-12-31, -in 2000000h) would sit in the table forever.
const MaxLeadTime = 366 * 24 * time.Hour

// MinRunAt is the earliest run time a job may be given: a past one means
// now, and one before it (a zero time, a Unix time of the wrong sign) is a
// mistake no door takes.
var MinRunAt = time.Unix(0, 0).UTC()

// validateNewJob checks what Enqueue stores beyond the endpoint and method.
func validateNewJob(maxAttempts int, timeout, delay time.Duration, runAt *time.Time) error {
	if maxAttempts < 1 || maxAttempts > MaxAttempts {
		return &FieldError{"max_attempts", fmt.Sprintf("max attempts %d must be between 1 and %d", maxAttempts, MaxAttempts)}
	}
	if err := ValidateTimeout(timeout); err != nil {
		return &FieldError{"timeout", err.Error()}
	}
	if delay < 0 {
		return &FieldError{"delay", fmt.Sprintf("delay %v must not be negative", delay)}
	}
	if delay > MaxLeadTime {
		return &FieldError{"delay", fmt.Sprintf("delay %v is more than 366 days ahead; a job may be due at most that far ahead", delay)}
	}
	// The local clock is good enough for a bound a year away.
	if runAt != nil && runAt.After(time.Now().Add(MaxLeadTime)) {
		return &FieldError{"run_at", fmt.Sprintf("run at %s is more than 366 days ahead; a job may be due at most that far ahead", runAt.UTC().Format(time.RFC3339))}
	}
	if runAt != nil && runAt.Before(MinRunAt) {
		return &FieldError{"run_at", fmt.Sprintf("run at %s is before 1970-01-01; a job's run time must be a real time (a past one means now)", runAt.UTC().Format(time.RFC3339))}
	}
	return nil
}

// Limits of a new job's fields.
const (
	// MaxPayload is the largest request body a job may carry: a job's
	// payload sits in a row that every claim reads back, so bulk data
	// belongs elsewhere (the payload can point to it).
	MaxPayload = 1 << 20
	// MaxUniqueKey is the longest unique key: SQL Server indexes at most
	// 900 bytes, an nvarchar(450).
	MaxUniqueKey = 450
	// MaxIdempotencyKey is the longest idempotency key; it travels in a
	// request header of every call.
	MaxIdempotencyKey = MaxNameLength
)

// FieldError says which field of a new job is wrong, and why.
type FieldError struct {
	Field   string // endpoint, method, max_attempts, timeout, delay, run_at, unique_key, idempotency_key, payload, queue, traceparent
	Problem string
}

func (e *FieldError) Error() string { return e.Problem }

// CheckNewJob validates a job to enqueue and fills its defaults: method
// POST and a fresh idempotency key. MaxAttempts must be set. Errors are
// *FieldError.
func CheckNewJob(j *store.NewJob) error {
	if err := ValidateEndpoint(j.Endpoint); err != nil {
		return &FieldError{"endpoint", err.Error()}
	}
	if j.Method == "" {
		j.Method = "POST"
	}
	switch j.Method {
	case "GET", "POST", "PUT", "PATCH", "DELETE":
	default:
		return &FieldError{"method", fmt.Sprintf("method %q is not one of GET, POST, PUT, PATCH, DELETE", j.Method)}
	}
	if err := validateNewJob(j.MaxAttempts, j.Timeout, j.Delay, j.RunAt); err != nil {
		return err
	}
	if j.RunAt != nil && j.Delay != 0 {
		return &FieldError{"run_at", "give a run time or a delay, not both"}
	}
	if len(j.Payload) > MaxPayload {
		return &FieldError{"payload", fmt.Sprintf("payload is %d bytes; at most %d (1 MiB) are allowed", len(j.Payload), MaxPayload)}
	}
	if n := utf8.RuneCountInString(j.UniqueKey); n > MaxUniqueKey || !utf8.ValidString(j.UniqueKey) {
		return &FieldError{"unique_key", fmt.Sprintf("unique key must be valid UTF-8 of at most %d characters (it has %d)", MaxUniqueKey, n)}
	}
	if j.IdempotencyKey == "" {
		j.IdempotencyKey = NewIdempotencyKey()
	} else if err := ValidateName("idempotency key", j.IdempotencyKey); err != nil {
		return &FieldError{"idempotency_key", err.Error()}
	}
	if j.Queue != "" {
		if err := ValidateQueueName(j.Queue); err != nil {
			return &FieldError{"queue", err.Error()}
		}
	}
	tp, err := CheckTraceparent(j.Traceparent)
	if err != nil {
		return &FieldError{"traceparent", err.Error()}
	}
	j.Traceparent = tp
	return nil
}

// isDotSegment reports whether a path segment means "." or ".." to some
// server: Java servlet containers drop ";parameters" ("..;" is ".."), and
// Windows drops trailing dots and spaces ("..." and ".. " are ".."). So any
// segment of dots only, once its parameters and trailing spaces are cut,
// is refused.
func isDotSegment(seg string) bool {
	seg, _, _ = strings.Cut(seg, ";")
	seg = strings.TrimRight(seg, " ")
	return seg != "" && strings.Trim(seg, ".") == ""
}
