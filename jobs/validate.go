package jobs

import (
	"time"

	"github.com/slotpoller/slotpoller/internal/jobspec"
	"github.com/slotpoller/slotpoller/internal/store"
)

// The limits and checks of a job's fields live in jobspec, which the client
// shares without importing this package; these are the same, for the
// node's own callers.

// Limits of a job's fields (see jobspec).
const (
	MaxNameLength     = jobspec.MaxNameLength
	MinCallTimeout    = jobspec.MinCallTimeout
	MaxCallTimeout    = jobspec.MaxCallTimeout
	MaxAttempts       = jobspec.MaxAttempts
	MaxLeadTime       = jobspec.MaxLeadTime
	MaxPayload        = jobspec.MaxPayload
	MaxUniqueKey      = jobspec.MaxUniqueKey
	MaxIdempotencyKey = jobspec.MaxIdempotencyKey
)

// MinRunAt is the earliest run time a job may be given (jobspec.MinRunAt).
var MinRunAt = jobspec.MinRunAt

// FieldError says which field of a new job is wrong, and why.
type FieldError = jobspec.FieldError

// ValidateName checks the name of a schedule or a task (kind says which);
// see jobspec.ValidateName.
func ValidateName(kind, name string) error { return jobspec.ValidateName(kind, name) }

// ValidateTimeout checks a call timeout; 0 means the node's default.
func ValidateTimeout(d time.Duration) error { return jobspec.ValidateTimeout(d) }

// CheckNewJob validates a job to enqueue and fills its defaults (see
// jobspec.CheckNewJob). Errors are *FieldError.
func CheckNewJob(j *store.NewJob) error { return jobspec.CheckNewJob(j) }
