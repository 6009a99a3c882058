package jobs

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/slotpoller/slotpoller/internal/jobspec"
)

// DefaultMaxAttempts is a job's attempt budget unless it or the node's
// config says otherwise (jobspec.DefaultMaxAttempts).
const DefaultMaxAttempts = jobspec.DefaultMaxAttempts

// Backoff is the delay before retry number attempt (1 = after the first
// failed attempt): base * 2^(attempt-1), capped at max, with "equal jitter":
// half of it fixed and the other half scaled by rnd() in [0,1). The result
// is never below base/2 and never above max. attempt < 1 counts as 1; max <= 0
// means no cap; if max < base, max wins. rnd nil means math/rand/v2; values
// outside [0,1) are clamped.
func Backoff(attempt int, base, max time.Duration, rnd func() float64) time.Duration {
	if base <= 0 {
		return 0
	}
	limit := max
	if limit <= 0 {
		limit = math.MaxInt64
	}
	if attempt < 1 {
		attempt = 1
	}
	d := base
	for i := 1; i < attempt && d < limit; i++ {
		if d > limit/2 {
			d = limit
			break
		}
		d *= 2
	}
	if d > limit {
		d = limit
	}
	r := 0.0
	if rnd != nil {
		r = rnd()
	} else {
		r = rand.Float64()
	}
	if !(r >= 0) { // also NaN
		r = 0
	}
	if r >= 1 {
		r = math.Nextafter(1, 0)
	}
	half := d / 2
	out := half + time.Duration(r*float64(d-half))
	if out > d {
		out = d
	}
	return out
}
