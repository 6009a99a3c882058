// Package callproto is slotpoller's call protocol: the headers a node sends
// on every call of an endpoint, and how a call is signed and verified. It
// uses the standard library only, so that an endpoint's program can import
// it (to check calls with a Verifier) without compiling in a database
// driver or any other part of slotpoller.
//
// The protocol's invariants:
//
//   - Every call carries X-Slotpoller-Job (or X-Slotpoller-Task for a
//     task), -Node, -Token, -Attempt, -Deadline, -Timeout-Ms and
//     Idempotency-Key, always with the call's own values: extra headers a
//     job asks for can never replace them.
//   - Idempotency-Key is the same on every attempt of a job, so an endpoint
//     that is called twice (a node died after the call, before recording
//     its result) can tell; X-Slotpoller-Token grows with every claim, so a
//     result written under an older token is a stale one.
//   - X-Slotpoller-Deadline (DeadlineFormat, UTC) is when the node gives up
//     on the call; an endpoint that is still working then must expect the
//     job to be called again.
//   - A signed call (v2) covers the method, the request target as sent,
//     the timestamp, every header above and the body (see Sign): a call
//     captured on the wire cannot be replayed with another key, attempt or
//     token, nor, with a Verifier's Replays set, replayed at all within its
//     window.
//   - Verify compares in constant time, accepts several keys (rotation) and
//     refuses v1 signatures unless told to.
package callproto

// Headers a node sends on every call. The reserved ones always carry the
// call's own values.
const (
	HeaderJob            = "X-Slotpoller-Job"
	HeaderTask           = "X-Slotpoller-Task"
	HeaderNode           = "X-Slotpoller-Node"
	HeaderToken          = "X-Slotpoller-Token"
	HeaderAttempt        = "X-Slotpoller-Attempt"
	HeaderIdempotencyKey = "Idempotency-Key"
	HeaderDeadline       = "X-Slotpoller-Deadline"
	HeaderTimeoutMs      = "X-Slotpoller-Timeout-Ms"
	// HeaderScheduledFor carries an occurrence's fire time (RFC 3339) on
	// the calls of a schedule's job.
	HeaderScheduledFor = "X-Slotpoller-Scheduled-For"
	// HeaderTraceparent is the W3C trace context of the call: the trace
	// its job was enqueued in (or one the node started), with the call's
	// own span as the parent of the endpoint's work. It is not signed: it
	// steers where the endpoint's spans are recorded, never what it does.
	HeaderTraceparent = "Traceparent"
	// HeaderTimestamp and HeaderSignature are sent only by a node with a
	// signing key; see Sign.
	HeaderTimestamp = "X-Slotpoller-Timestamp"
	HeaderSignature = "X-Slotpoller-Signature"

	// DeadlineFormat is the layout of X-Slotpoller-Deadline: RFC 3339 in UTC
	// with milliseconds, e.g. 2024-05-01T12:00:30.000Z.
	DeadlineFormat = "2006-01-02T15:04:05.000Z07:00"
)
