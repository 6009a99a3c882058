package callproto

import (
	"bytes"
	"container/heap"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Signed calls. A node with a signing key (jobs.signing_key) sends on every
// call
//
//	X-Slotpoller-Timestamp: <Unix seconds>
//	X-Slotpoller-Signature: v2=<lowercase hex HMAC-SHA-256(key, canonical)>
//
// where canonical is, with every line ended by a single "\n":
//
//	v2
//	METHOD
//	request-URI
//	timestamp
//	idempotency-key:<value>
//	x-slotpoller-attempt:<value>
//	x-slotpoller-deadline:<value>
//	x-slotpoller-job:<value>
//	x-slotpoller-node:<value>
//	x-slotpoller-scheduled-for:<value>
//	x-slotpoller-task:<value>
//	x-slotpoller-timeout-ms:<value>
//	x-slotpoller-token:<value>
//	body
//
// METHOD is the request method as sent (upper case), request-URI is the path
// and raw query exactly as in the request line (URL.RequestURI(), e.g.
// /app/jobs/x?a=1), timestamp is the decimal value of X-Slotpoller-Timestamp
// and body is the exact request body (empty when there is none, and not
// followed by a newline). The signed headers come in that fixed order, by
// lower-case name; a value is the header's value with leading and trailing
// spaces and tabs removed (as HTTP servers hand it over). A header that is
// absent is its bare name with no colon ("x-slotpoller-task"), so it
// differs from one sent empty ("x-slotpoller-task:"). HTTP header values
// cannot hold a newline, so the lines cannot run into each other.
//
// v1, what nodes sent before, signs only METHOD "\n" request-URI "\n"
// timestamp "\n" body: a captured call could be replayed under another
// Idempotency-Key, attempt or token. Verifiers accept it only when told
// to (Verifier.AcceptV1), while the nodes are upgraded.
const (
	// SignatureVersion prefixes the signature the invoker sends: "v2=<hex>".
	SignatureVersion = "v2"
	// SignatureVersionV1 prefixes the older signature, which covers no
	// headers: "v1=<hex>". See Verifier.AcceptV1.
	SignatureVersionV1 = "v1"

	// DefaultSignatureMaxAge is the window a Verifier uses when its MaxAge
	// is <= 0.
	DefaultSignatureMaxAge = 5 * time.Minute

	// DefaultReplayCacheSize is the capacity of NewReplayCache(0).
	DefaultReplayCacheSize = 100_000
)

// signedHeaders are the headers a v2 signature covers, in canonical order.
// Every header the invoker sets that says which run or attempt this is.
var signedHeaders = []string{
	"idempotency-key",
	"x-slotpoller-attempt",
	"x-slotpoller-deadline",
	"x-slotpoller-job",
	"x-slotpoller-node",
	"x-slotpoller-scheduled-for",
	"x-slotpoller-task",
	"x-slotpoller-timeout-ms",
	"x-slotpoller-token",
}

// SignedHeaders returns the lower-case names of the headers a v2 signature
// covers, in the order they appear in the canonical string.
func SignedHeaders() []string { return append([]string(nil), signedHeaders...) }

// Errors of VerifySignature and Verifier.Verify. They are returned wrapped
// with context: test them with errors.Is.
var (
	// ErrSignatureMissing: the request has no X-Slotpoller-Timestamp or no
	// X-Slotpoller-Signature header.
	ErrSignatureMissing = errors.New("slotpoller signature missing")
	// ErrSignatureStale: the timestamp is further than maxAge from now, in
	// the past or in the future.
	ErrSignatureStale = errors.New("slotpoller signature timestamp out of range")
	// ErrSignatureInvalid: the headers are malformed or repeated, the
	// signature is a v1 one and v1 is not accepted, or the signature does
	// not match the request (wrong key, or a tampered method, path, query,
	// timestamp, signed header or body).
	ErrSignatureInvalid = errors.New("slotpoller signature invalid")
	// ErrSignatureReplayed: the signature is valid but was already accepted
	// within its window (Verifier.Replays): the same request, sent again.
	ErrSignatureReplayed = errors.New("slotpoller signature already used")
)

// Sign returns the X-Slotpoller-Signature value, "v2=<lowercase hex>", of a
// request: HMAC-SHA-256 with key over the v2 canonical string (see the
// package's "Signed calls" comment) of method, requestURI, timestamp, the
// signed headers found in header (by any case; nil means none) and body.
// method and requestURI are used exactly as given: pass them as they
// appear in the request line. A signed header given more than once is
// signed with its first value; verifiers refuse such a request.
func Sign(method, requestURI string, timestamp int64, header http.Header, body, key []byte) string {
	return SignatureVersion + "=" + hex.EncodeToString(macV2(method, requestURI, timestamp, header, body, key))
}

// SignV1 returns the older "v1=<lowercase hex>" signature: HMAC-SHA-256
// with key over method + "\n" + requestURI + "\n" + timestamp (decimal) +
// "\n" + body. Nodes no longer send it; it is here to test verifiers that
// still accept it.
func SignV1(method, requestURI string, timestamp int64, body, key []byte) string {
	return SignatureVersionV1 + "=" + hex.EncodeToString(macV1(method, requestURI, timestamp, body, key))
}

func macV1(method, requestURI string, timestamp int64, body, key []byte) []byte {
	m := hmac.New(sha256.New, key)
	io.WriteString(m, method+"\n"+requestURI+"\n"+strconv.FormatInt(timestamp, 10)+"\n")
	m.Write(body)
	return m.Sum(nil)
}

func macV2(method, requestURI string, timestamp int64, header http.Header, body, key []byte) []byte {
	m := hmac.New(sha256.New, key)
	io.WriteString(m, SignatureVersion+"\n"+method+"\n"+requestURI+"\n"+strconv.FormatInt(timestamp, 10)+"\n")
	for _, name := range signedHeaders {
		io.WriteString(m, name)
		if values := header.Values(name); len(values) > 0 {
			io.WriteString(m, ":"+strings.Trim(values[0], " \t"))
		}
		m.Write([]byte{'\n'})
	}
	m.Write(body)
	return m.Sum(nil)
}

// Verifier checks the signatures of incoming calls. The zero value refuses
// everything: set Keys.
type Verifier struct {
	// Keys are the accepted keys: the current one and, during a key
	// rotation, the previous one. A call signed with any of them is valid.
	Keys [][]byte
	// MaxAge is how far the timestamp may be from now, either way; <= 0
	// means DefaultSignatureMaxAge.
	MaxAge time.Duration
	// AcceptV1 also accepts v1 signatures, which do not cover
	// Idempotency-Key or the X-Slotpoller-* headers. Set it only while
	// nodes older than v2 may still call, then remove it: off, a v1 call
	// is refused with ErrSignatureInvalid.
	AcceptV1 bool
	// Replays, when set, refuses a valid signature seen before within its
	// window (ErrSignatureReplayed), so a captured call cannot be sent
	// again. It remembers accepted signatures until they go stale. An
	// in-process ReplayCache protects one process only: behind a load
	// balancer, give every instance one shared ReplayStore.
	Replays ReplayStore
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// ReplayStore remembers the signatures a Verifier accepted.
type ReplayStore interface {
	// FirstUse records id until expires (after which the signature is
	// stale anyway) and reports whether id was not already recorded. now
	// is the verifier's clock; entries that expired before now may go.
	FirstUse(ctx context.Context, id string, now, expires time.Time) (bool, error)
}

// VerifySignature checks the v2 slotpoller signature of an incoming request
// with key, within maxAge of now: it is Verifier{Keys: {key}, MaxAge:
// maxAge}.Verify(r) at now (zero: time.Now()), without a replay check. It
// refuses v1 signatures; use a Verifier to accept them, to accept several
// keys or to refuse replays.
func VerifySignature(r *http.Request, key []byte, maxAge time.Duration, now time.Time) error {
	v := Verifier{Keys: [][]byte{key}, MaxAge: maxAge}
	if !now.IsZero() {
		v.Now = func() time.Time { return now }
	}
	return v.Verify(r)
}

// Verify checks the slotpoller signature of an incoming request. It reads
// the whole body and puts it back (r.Body can be read again by the
// handler), so limit the body first (http.MaxBytesReader) on an endpoint
// reachable from untrusted networks.
//
// It returns nil for a valid signature, or an error wrapping
// ErrSignatureMissing (a header is absent), ErrSignatureStale (the timestamp
// is more than MaxAge before or after now), ErrSignatureInvalid (malformed
// or repeated headers, a refused v1 signature, or a signature that matches
// none of the keys) or ErrSignatureReplayed. Any other error comes from
// reading the body or from the ReplayStore. The comparison is constant-time.
//
// The request URI checked is r.RequestURI, the target exactly as received
// (untouched by http.StripPrefix and the like), or r.URL.RequestURI() when
// RequestURI is empty.
func (v *Verifier) Verify(r *http.Request) error {
	keys := make([][]byte, 0, len(v.Keys))
	for _, key := range v.Keys {
		if len(key) > 0 {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return fmt.Errorf("%w: no verification key configured", ErrSignatureInvalid)
	}
	maxAge := v.MaxAge
	if maxAge <= 0 {
		maxAge = DefaultSignatureMaxAge
	}
	now := time.Now()
	if v.Now != nil {
		now = v.Now()
	}
	tsValue, err := singleHeader(r.Header, HeaderTimestamp)
	if err != nil {
		return err
	}
	sigValue, err := singleHeader(r.Header, HeaderSignature)
	if err != nil {
		return err
	}
	ts, err := parseTimestamp(tsValue)
	if err != nil {
		return err
	}
	switch age := now.Sub(time.Unix(ts, 0)); {
	case age > maxAge:
		return fmt.Errorf("%w: %s %d is %v old, more than %v", ErrSignatureStale, HeaderTimestamp, ts,
			age.Round(time.Second), maxAge)
	case age < -maxAge:
		return fmt.Errorf("%w: %s %d is %v ahead of this clock, more than %v", ErrSignatureStale, HeaderTimestamp,
			ts, time.Unix(ts, 0).Sub(now).Round(time.Second), maxAge)
	}
	version, got, err := parseSignature(sigValue)
	if err != nil {
		return err
	}
	if version == SignatureVersionV1 && !v.AcceptV1 {
		return fmt.Errorf("%w: a v1 signature, which does not cover Idempotency-Key and the X-Slotpoller-* headers, "+
			"and v1 is not accepted (a node older than v2 signatures?)", ErrSignatureInvalid)
	}
	if version == SignatureVersion {
		for _, name := range signedHeaders {
			if n := len(r.Header.Values(name)); n > 1 {
				return fmt.Errorf("%w: %d %s headers, want at most one", ErrSignatureInvalid, n, name)
			}
		}
	}

	body, err := readAndRestoreBody(r)
	if err != nil {
		return fmt.Errorf("verifying slotpoller signature: reading the request body: %w", err)
	}
	uri := requestURI(r)
	valid := false
	for _, key := range keys {
		var want []byte
		if version == SignatureVersion {
			want = macV2(r.Method, uri, ts, r.Header, body, key)
		} else {
			want = macV1(r.Method, uri, ts, body, key)
		}
		valid = hmac.Equal(got, want) || valid // no early exit: same time whichever key matches
	}
	if !valid {
		return fmt.Errorf("%w: %s does not match %s %s", ErrSignatureInvalid, HeaderSignature, r.Method, uri)
	}
	if v.Replays != nil {
		// The signature itself is the id: it is unique to this exact call,
		// and only the key holders can make another.
		id := version + "=" + hex.EncodeToString(got)
		first, err := v.Replays.FirstUse(r.Context(), id, now, time.Unix(ts, 0).Add(maxAge))
		if err != nil {
			return fmt.Errorf("verifying slotpoller signature: checking for a replay: %w", err)
		}
		if !first {
			return fmt.Errorf("%w: %s %s with timestamp %d was already accepted", ErrSignatureReplayed, r.Method, uri, ts)
		}
	}
	return nil
}

// ReplayCache is an in-memory ReplayStore for one process. It holds at
// most a fixed number of entries; when full, it forgets the entry closest
// to going stale, so size it above the calls one process receives in a
// signature window. Safe for concurrent use.
type ReplayCache struct {
	mu      sync.Mutex
	max     int
	expires map[string]time.Time
	queue   expiryQueue
}

// NewReplayCache returns an empty cache of at most size entries; size <= 0
// means DefaultReplayCacheSize.
func NewReplayCache(size int) *ReplayCache {
	if size <= 0 {
		size = DefaultReplayCacheSize
	}
	return &ReplayCache{max: size, expires: make(map[string]time.Time)}
}

// FirstUse implements ReplayStore.
func (c *ReplayCache) FirstUse(_ context.Context, id string, now, expires time.Time) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.queue) > 0 && c.queue[0].expires.Before(now) {
		delete(c.expires, heap.Pop(&c.queue).(replayEntry).id)
	}
	if _, ok := c.expires[id]; ok {
		return false, nil
	}
	for len(c.queue) >= c.max {
		delete(c.expires, heap.Pop(&c.queue).(replayEntry).id)
	}
	c.expires[id] = expires
	heap.Push(&c.queue, replayEntry{id: id, expires: expires})
	return true, nil
}

// Len returns the number of signatures remembered.
func (c *ReplayCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.expires)
}

type replayEntry struct {
	id      string
	expires time.Time
}

// expiryQueue is a min-heap of entries by expiry.
type expiryQueue []replayEntry

func (q expiryQueue) Len() int           { return len(q) }
func (q expiryQueue) Less(i, j int) bool { return q[i].expires.Before(q[j].expires) }
func (q expiryQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *expiryQueue) Push(x any)        { *q = append(*q, x.(replayEntry)) }
func (q *expiryQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// singleHeader returns the one value of header name.
func singleHeader(h http.Header, name string) (string, error) {
	switch values := h.Values(name); len(values) {
	case 0:
		return "", fmt.Errorf("%w: no %s header", ErrSignatureMissing, name)
	case 1:
		if strings.TrimSpace(values[0]) == "" {
			return "", fmt.Errorf("%w: empty %s header", ErrSignatureMissing, name)
		}
		return values[0], nil
	default:
		return "", fmt.Errorf("%w: %d %s headers, want one", ErrSignatureInvalid, len(values), name)
	}
}

// parseTimestamp accepts the decimal Unix seconds the invoker sends: digits
// only, no sign, no leading zeros.
func parseTimestamp(s string) (int64, error) {
	s = strings.TrimSpace(s)
	bad := s == "" || len(s) > 18
	for i := 0; i < len(s) && !bad; i++ {
		bad = s[i] < '0' || s[i] > '9'
	}
	if bad {
		return 0, fmt.Errorf("%w: %s %q is not Unix seconds", ErrSignatureInvalid, HeaderTimestamp, s)
	}
	ts, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(ts, 10) != s {
		// Leading zeros would make the signed text differ between
		// verifiers that use the header as written and those that reformat.
		return 0, fmt.Errorf("%w: %s %q is not canonical Unix seconds", ErrSignatureInvalid, HeaderTimestamp, s)
	}
	return ts, nil
}

// parseSignature decodes "v2=<64 hex digits>" or "v1=<64 hex digits>".
func parseSignature(s string) (version string, sig []byte, err error) {
	s = strings.TrimSpace(s)
	version, hexSig, ok := strings.Cut(s, "=")
	if !ok || (version != SignatureVersion && version != SignatureVersionV1) {
		return "", nil, fmt.Errorf("%w: %s does not start with %q (or %q)", ErrSignatureInvalid, HeaderSignature,
			SignatureVersion+"=", SignatureVersionV1+"=")
	}
	sig, err = hex.DecodeString(hexSig)
	if err != nil || len(sig) != sha256.Size {
		return "", nil, fmt.Errorf("%w: %s is not %d hex-encoded bytes", ErrSignatureInvalid, HeaderSignature, sha256.Size)
	}
	return version, sig, nil
}

// requestURI is the request target as the client sent it.
func requestURI(r *http.Request) string {
	uri := r.RequestURI
	if uri == "" {
		return r.URL.RequestURI()
	}
	if !strings.HasPrefix(uri, "/") {
		// Absolute form ("http://host/path?q", as sent to a proxy): keep
		// what follows the authority, as written.
		if _, rest, ok := strings.Cut(uri, "://"); ok {
			if i := strings.IndexAny(rest, "/?"); i >= 0 {
				if rest[i] == '?' {
					return "/" + rest[i:]
				}
				return rest[i:]
			}
			return "/"
		}
	}
	return uri
}

// readAndRestoreBody reads all of r.Body and replaces it with a reader over
// the same bytes (followed by the read error, if any).
func readAndRestoreBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// SignRequest sets the timestamp and v2 signature headers of req, whose
// body is body (nil when it has none), at now. Call it after every signed
// header is set: a header set afterwards is not covered.
func SignRequest(req *http.Request, body, key []byte, now time.Time) {
	ts := now.Unix()
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign(req.Method, req.URL.RequestURI(), ts, req.Header, body, key))
}
