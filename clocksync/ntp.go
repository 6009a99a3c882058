package clocksync

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/beevik/ntp"

	"github.com/slotpoller/slotpoller/internal/clock"
)

// defaultNTPTimeout bounds an NTP query when ctx has no deadline.
const defaultNTPTimeout = 5 * time.Second

// NTPResult is the outcome of an NTP health check of the local clock.
type NTPResult struct {
	// Offset is NTP time minus local time, the same sign as
	// Estimate.Offset: add it to local time to get NTP time.
	Offset time.Duration
	// RTT is the round trip to the NTP server.
	RTT time.Duration
	// Healthy reports |Offset| <= the maxOffset given to CheckNTP.
	Healthy bool
}

// CheckNTP queries an NTP server ("host" or "host:port"; port 123 by default)
// and reports how far the local system clock is from it. It is a health check
// only: slotpoller's reference is the database, and a node with an unhealthy
// local clock still behaves correctly, but an operator should know. The query
// times out at ctx's deadline, or after 5s if ctx has none, and stops early
// if ctx is cancelled.
//
// It reads the operating system's clock, not a clock.Clock, because the
// system clock is what it checks.
func CheckNTP(ctx context.Context, server string, maxOffset time.Duration) (NTPResult, error) {
	wrap := func(err error) (NTPResult, error) {
		return NTPResult{}, fmt.Errorf("ntp health check against %s: %w", server, err)
	}
	if err := ctx.Err(); err != nil {
		return wrap(err)
	}
	timeout := defaultNTPTimeout
	if dl, ok := ctx.Deadline(); ok {
		// A context deadline is in real time.
		timeout = dl.Sub(clock.Real().Now())
		if timeout <= 0 {
			return wrap(context.DeadlineExceeded)
		}
	}

	// beevik/ntp takes no context, so close the socket on cancellation to
	// end the query at once rather than at its timeout.
	var stop func() bool
	opts := ntp.QueryOptions{
		Timeout: timeout,
		Dialer: func(_, remote string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "udp", remote)
			if err != nil {
				return nil, err
			}
			stop = context.AfterFunc(ctx, func() { c.Close() })
			return c, nil
		},
	}
	resp, err := ntp.QueryWithOptions(server, opts)
	if stop != nil {
		stop()
	}
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			// Report why the query stopped, not the closed socket.
			err = fmt.Errorf("%w (%v)", ctxErr, err)
		}
		return wrap(err)
	}
	if err := resp.Validate(); err != nil {
		return wrap(fmt.Errorf("unusable response: %w", err))
	}
	off := resp.ClockOffset
	return NTPResult{
		Offset:  off,
		RTT:     resp.RTT,
		Healthy: off.Abs() <= maxOffset,
	}, nil
}
