package jobs

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Signed calls. With Invoker.SigningKey set, every call carries
//
//	X-Slotpoller-Timestamp: <Unix seconds>
//	X-Slotpoller-Signature: v1=<lowercase hex HMAC-SHA-256(key, canonical)>
//
// where canonical is
//
//	METHOD + "\n" + request-URI + "\n" + timestamp + "\n" + body
//
// METHOD is the request method as sent (upper case), request-URI is the path
// and raw query exactly as in the request line (URL.RequestURI(), e.g.
// /app/jobs/x?a=1), timestamp is the decimal value of X-Slotpoller-Timestamp
// and body is the exact request body (empty when there is none).
const (
	// SignatureVersion prefixes the signature header's value: "v1=<hex>".
	SignatureVersion = "v1"

	// DefaultSignatureMaxAge is the window VerifySignature uses when given
	// maxAge <= 0.
	DefaultSignatureMaxAge = 5 * time.Minute
)

// Errors of VerifySignature. They are returned wrapped with context: test
// them with errors.Is.
var (
	// ErrSignatureMissing: the request has no X-Slotpoller-Timestamp or no
	// X-Slotpoller-Signature header.
	ErrSignatureMissing = errors.New("slotpoller signature missing")
	// ErrSignatureStale: the timestamp is further than maxAge from now, in
	// the past or in the future.
	ErrSignatureStale = errors.New("slotpoller signature timestamp out of range")
	// ErrSignatureInvalid: the headers are malformed or repeated, or the
	// signature does not match the request (wrong key, or a tampered method,
	// path, query, timestamp or body).
	ErrSignatureInvalid = errors.New("slotpoller signature invalid")
)

// Sign returns the X-Slotpoller-Signature value, "v1=<lowercase hex>", of a
// request: HMAC-SHA-256 with key over method + "\n" + requestURI + "\n" +
// timestamp (decimal) + "\n" + body. method and requestURI are used exactly
// as given: pass them as they appear in the request line.
func Sign(method, requestURI string, timestamp int64, body, key []byte) string {
	return SignatureVersion + "=" + hex.EncodeToString(signatureMAC(method, requestURI, timestamp, body, key))
}

// signatureMAC is the raw HMAC of the canonical string.
func signatureMAC(method, requestURI string, timestamp int64, body, key []byte) []byte {
	m := hmac.New(sha256.New, key)
	io.WriteString(m, method)
	m.Write([]byte{'\n'})
	io.WriteString(m, requestURI)
	m.Write([]byte{'\n'})
	io.WriteString(m, strconv.FormatInt(timestamp, 10))
	m.Write([]byte{'\n'})
	m.Write(body)
	return m.Sum(nil)
}

// VerifySignature checks the slotpoller signature of an incoming request
// with key. It reads the whole body and puts it back (r.Body can be read
// again by the handler), so limit the body first (http.MaxBytesReader) on
// an endpoint reachable from untrusted networks.
//
// It returns nil for a valid signature, or an error wrapping
// ErrSignatureMissing (a header is absent), ErrSignatureStale (the timestamp
// is more than maxAge before or after now) or ErrSignatureInvalid (malformed
// or repeated headers, or a signature that does not match). maxAge <= 0
// means DefaultSignatureMaxAge; a zero now means time.Now(). Any other
// error comes from reading the body. The comparison is constant-time.
//
// The request URI checked is r.RequestURI, the target exactly as received
// (untouched by http.StripPrefix and the like), or r.URL.RequestURI() when
// RequestURI is empty. A signature is only good for a short window: pair it
// with the Idempotency-Key header to refuse replays within it.
func VerifySignature(r *http.Request, key []byte, maxAge time.Duration, now time.Time) error {
	if len(key) == 0 {
		return fmt.Errorf("%w: no verification key configured", ErrSignatureInvalid)
	}
	if maxAge <= 0 {
		maxAge = DefaultSignatureMaxAge
	}
	if now.IsZero() {
		now = time.Now()
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
	got, err := parseSignature(sigValue)
	if err != nil {
		return err
	}

	body, err := readAndRestoreBody(r)
	if err != nil {
		return fmt.Errorf("verifying slotpoller signature: reading the request body: %w", err)
	}
	want := signatureMAC(r.Method, requestURI(r), ts, body, key)
	if !hmac.Equal(got, want) {
		return fmt.Errorf("%w: %s does not match %s %s", ErrSignatureInvalid, HeaderSignature, r.Method, requestURI(r))
	}
	return nil
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

// parseSignature decodes "v1=<64 hex digits>".
func parseSignature(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	hexSig, ok := strings.CutPrefix(s, SignatureVersion+"=")
	if !ok {
		return nil, fmt.Errorf("%w: %s does not start with %q", ErrSignatureInvalid, HeaderSignature, SignatureVersion+"=")
	}
	sig, err := hex.DecodeString(hexSig)
	if err != nil || len(sig) != sha256.Size {
		return nil, fmt.Errorf("%w: %s is not %d hex-encoded bytes", ErrSignatureInvalid, HeaderSignature, sha256.Size)
	}
	return sig, nil
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

// signRequest sets the timestamp and signature headers of req, whose body
// is body (nil when it has none).
func signRequest(req *http.Request, body, key []byte, now time.Time) {
	ts := now.Unix()
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign(req.Method, req.URL.RequestURI(), ts, body, key))
}
