package jobspec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// TraceparentLength is the length of a W3C traceparent of version 00:
// version-traceid-parentid-flags, 2+1+32+1+16+1+2 characters.
const TraceparentLength = 55

// Trace is a W3C trace context (https://www.w3.org/TR/trace-context/): the
// trace a job belongs to, the span that enqueued it (or the node's call
// span, on the call), and the trace flags (bit 0: sampled).
type Trace struct {
	ID     [16]byte
	Parent [8]byte
	Flags  byte
}

// ParseTraceparent reads a traceparent header value. Hex digits may be of
// either case (the value is stored lowercased); the version must not be
// ff, and neither id may be all zeros, as the W3C recommendation says. A
// version above 00 is read by its first four fields, and only when it is
// 55 characters long: a longer one would not fit the column that holds it.
func ParseTraceparent(s string) (Trace, error) {
	var t Trace
	bad := func(why string) error {
		return fmt.Errorf("traceparent %q is not a W3C traceparent (version-traceid-parentid-flags, 55 characters of hex and dashes): %s", s, why)
	}
	if len(s) != TraceparentLength {
		return t, bad(fmt.Sprintf("it has %d characters", len(s)))
	}
	l := strings.ToLower(s)
	if l[2] != '-' || l[35] != '-' || l[52] != '-' {
		return t, bad("a dash is missing or misplaced")
	}
	version, err := hex.DecodeString(l[0:2])
	if err != nil {
		return t, bad("the version is not hex")
	}
	if version[0] == 0xff {
		return t, bad("version ff is invalid")
	}
	if _, err := hex.Decode(t.ID[:], []byte(l[3:35])); err != nil {
		return t, bad("the trace id is not hex")
	}
	if _, err := hex.Decode(t.Parent[:], []byte(l[36:52])); err != nil {
		return t, bad("the parent id is not hex")
	}
	flags, err := hex.DecodeString(l[53:55])
	if err != nil {
		return t, bad("the flags are not hex")
	}
	t.Flags = flags[0]
	if t.ID == [16]byte{} {
		return t, bad("the trace id is all zeros")
	}
	if t.Parent == [8]byte{} {
		return t, bad("the parent id is all zeros")
	}
	return t, nil
}

// CheckTraceparent returns a traceparent as it is stored (lowercased), or
// "" for "" (no trace).
func CheckTraceparent(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	if _, err := ParseTraceparent(s); err != nil {
		return "", err
	}
	return strings.ToLower(s), nil
}

// String is the trace as a traceparent header value of version 00.
func (t Trace) String() string {
	var b [TraceparentLength]byte
	b[0], b[1], b[2] = '0', '0', '-'
	hex.Encode(b[3:35], t.ID[:])
	b[35] = '-'
	hex.Encode(b[36:52], t.Parent[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{t.Flags})
	return string(b[:])
}

// JobTrace is the trace of a job enqueued without one: its id derived
// from the job's id and idempotency key, so that every attempt of the job,
// on whichever node, is in the same trace without the trace being
// written anywhere; sampled, as a trace a node starts itself. It has no
// parent: the caller gives each call a span of its own.
func JobTrace(jobID int64, idempotencyKey string) Trace {
	sum := sha256.Sum256([]byte("slotpoller job trace\x00" + strconv.FormatInt(jobID, 10) + "\x00" + idempotencyKey))
	var t Trace
	copy(t.ID[:], sum[:16])
	t.Flags = 1
	return t
}
