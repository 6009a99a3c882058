package callproto

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/clock"
)

var testSigningKey = []byte("0123456789abcdef-test-key")

// signedRequest is a request as an endpoint received it.
type signedRequest struct {
	method     string
	requestURI string
	header     http.Header
	body       string
	verifyErr  error  // VerifySignature's verdict inside the handler
	bodyAfter  string // what the handler read after verifying
}

// recordingServer serves signed calls: it verifies each with key at now
// (zero: time.Now) and records what it saw, then answers 204. handler, when
// set, sees each request first and may answer it instead (returning true).
func recordingServer(t *testing.T, key []byte, now time.Time,
	handler func(http.ResponseWriter, *http.Request) bool) (*httptest.Server, chan signedRequest) {
	t.Helper()
	seen := make(chan signedRequest, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if handler != nil && handler(w, r) {
			return
		}
		// What arrived, read before verifying...
		raw, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(raw)))
		verifyErr := VerifySignature(r, key, 5*time.Minute, now)
		// ...and what the handler reads after it.
		after, _ := io.ReadAll(r.Body)
		seen <- signedRequest{method: r.Method, requestURI: r.RequestURI, header: r.Header.Clone(), body: string(raw),
			verifyErr: verifyErr, bodyAfter: string(after)}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, seen
}

// replay builds a server-side request from what was received, for
// tampering with.
func (s signedRequest) replay(method, requestURI, body string) *http.Request {
	r := httptest.NewRequest(method, requestURI, strings.NewReader(body))
	r.Header = s.header.Clone()
	return r
}

func TestSignV1KnownAnswer(t *testing.T) {
	cases := []struct {
		method, uri string
		ts          int64
		body        string
		// want was computed outside Go, with
		//   printf 'METHOD\nURI\nTS\nBODY' | openssl dgst -sha256 -hmac KEY
		want string
	}{
		{"POST", "/app/jobs/report?day=2024-05-01&x=%20y", 1714572000, `{"id":42}`,
			"679a0e0e3645165058921e46f4fe8755a82d0110a05b1cb69169b528cd79a81b"},
		{"GET", "/jobs/ping", 1714572000, "",
			"b7d4b9112518e00ab5548e3329434bced1f58cdb62a2368ebd44df344b8a81ee"},
	}
	for _, tc := range cases {
		// The canonical string, spelled out independently of the package.
		canonical := tc.method + "\n" + tc.uri + "\n" + strconv.FormatInt(tc.ts, 10) + "\n" + tc.body
		m := hmac.New(sha256.New, testSigningKey)
		m.Write([]byte(canonical))
		independent := hex.EncodeToString(m.Sum(nil))
		require.Equal(t, tc.want, independent, "test vector")

		var body []byte
		if tc.body != "" {
			body = []byte(tc.body)
		}
		got := SignV1(tc.method, tc.uri, tc.ts, body, testSigningKey)
		require.Equal(t, "v1="+tc.want, got)
	}
	// Every input matters.
	base := SignV1("POST", "/x", 1, []byte("b"), testSigningKey)
	require.NotEqual(t, base, SignV1("PUT", "/x", 1, []byte("b"), testSigningKey))
	require.NotEqual(t, base, SignV1("POST", "/y", 1, []byte("b"), testSigningKey))
	require.NotEqual(t, base, SignV1("POST", "/x", 2, []byte("b"), testSigningKey))
	require.NotEqual(t, base, SignV1("POST", "/x", 1, []byte("c"), testSigningKey))
	require.NotEqual(t, base, SignV1("POST", "/x", 1, []byte("b"), []byte("another-key-0123456")))
}

func TestSignKnownAnswer(t *testing.T) {
	jobCall := http.Header{}
	jobCall.Set("Idempotency-Key", "slotpoller-job-42")
	jobCall.Set("X-Slotpoller-Attempt", "1")
	jobCall.Set("X-Slotpoller-Deadline", "2024-05-01T12:00:30.000Z")
	jobCall.Set("X-Slotpoller-Job", "42")
	jobCall.Set("X-Slotpoller-Node", "web-01")
	jobCall.Set("X-Slotpoller-Timeout-Ms", "30000")
	jobCall.Set("X-Slotpoller-Token", "7")
	jobCall.Set("Content-Type", "application/json") // not signed
	taskCall := http.Header{}
	taskCall.Set("Idempotency-Key", "slotpoller-task-mailer-7-3")
	taskCall.Set("X-Slotpoller-Attempt", "2")
	taskCall.Set("X-Slotpoller-Deadline", "2024-05-01T12:00:10.000Z")
	taskCall.Set("X-Slotpoller-Node", "") // sent empty, unlike the absent job
	taskCall.Set("X-Slotpoller-Task", "mailer")
	taskCall.Set("X-Slotpoller-Timeout-Ms", "10000")
	taskCall.Set("X-Slotpoller-Token", "7")

	cases := []struct {
		method, uri string
		header      http.Header
		body        string
		// canonical is spelled out here, independently of the package, and
		// want was computed outside Go, with
		//   printf '%s' "$canonical" | openssl dgst -sha256 -hmac '0123456789abcdef-test-key'
		// (docs/signed-calls.md shows the full printf for the first vector).
		canonical, want string
	}{
		{"POST", "/app/jobs/report?day=2024-05-01&x=%20y", jobCall, `{"id":42}`,
			"v2\nPOST\n/app/jobs/report?day=2024-05-01&x=%20y\n1714572000\n" +
				"idempotency-key:slotpoller-job-42\nx-slotpoller-attempt:1\nx-slotpoller-deadline:2024-05-01T12:00:30.000Z\n" +
				"x-slotpoller-job:42\nx-slotpoller-node:web-01\nx-slotpoller-scheduled-for\nx-slotpoller-task\n" +
				"x-slotpoller-timeout-ms:30000\nx-slotpoller-token:7\n" + `{"id":42}`,
			"1fc092da394486e4ac2d15c51f1149b3c07ec6cc2e3484250590f5e816b51bc8"},
		{"GET", "/jobs/ping", taskCall, "",
			"v2\nGET\n/jobs/ping\n1714572000\n" +
				"idempotency-key:slotpoller-task-mailer-7-3\nx-slotpoller-attempt:2\nx-slotpoller-deadline:2024-05-01T12:00:10.000Z\n" +
				"x-slotpoller-job\nx-slotpoller-node:\nx-slotpoller-scheduled-for\nx-slotpoller-task:mailer\n" +
				"x-slotpoller-timeout-ms:10000\nx-slotpoller-token:7\n",
			"b683d1f72cac779ad7f1b7f1e2f7947dbd07bb70a2f6dc7acd62676dfa81e5ef"},
	}
	for _, tc := range cases {
		m := hmac.New(sha256.New, testSigningKey)
		m.Write([]byte(tc.canonical))
		require.Equal(t, tc.want, hex.EncodeToString(m.Sum(nil)), "test vector")

		var body []byte
		if tc.body != "" {
			body = []byte(tc.body)
		}
		require.Equal(t, "v2="+tc.want, Sign(tc.method, tc.uri, 1714572000, tc.header, body, testSigningKey))
	}
	require.Equal(t, []string{"idempotency-key", "x-slotpoller-attempt", "x-slotpoller-deadline", "x-slotpoller-job",
		"x-slotpoller-node", "x-slotpoller-scheduled-for", "x-slotpoller-task", "x-slotpoller-timeout-ms",
		"x-slotpoller-token"}, SignedHeaders())

	// Every input matters; surrounding spaces and tabs in a value do not
	// (servers strip them), nor does the case of a header's name.
	h := http.Header{HeaderJob: {"1"}}
	base := Sign("POST", "/x", 1, h, []byte("b"), testSigningKey)
	require.NotEqual(t, base, Sign("PUT", "/x", 1, h, []byte("b"), testSigningKey))
	require.NotEqual(t, base, Sign("POST", "/y", 1, h, []byte("b"), testSigningKey))
	require.NotEqual(t, base, Sign("POST", "/x", 2, h, []byte("b"), testSigningKey))
	require.NotEqual(t, base, Sign("POST", "/x", 1, h, []byte("c"), testSigningKey))
	require.NotEqual(t, base, Sign("POST", "/x", 1, h, []byte("b"), []byte("another-key-0123456")))
	require.NotEqual(t, base, Sign("POST", "/x", 1, http.Header{HeaderJob: {"2"}}, []byte("b"), testSigningKey))
	require.NotEqual(t, base, Sign("POST", "/x", 1, http.Header{HeaderJob: {""}}, []byte("b"), testSigningKey))
	require.NotEqual(t, base, Sign("POST", "/x", 1, nil, []byte("b"), testSigningKey))
	require.Equal(t, base, Sign("POST", "/x", 1, http.Header{HeaderJob: {" \t1 "}}, []byte("b"), testSigningKey))
	require.Equal(t, base, Sign("POST", "/x", 1, http.Header{HeaderJob: {"1"}, "X-Other": {"x"}}, []byte("b"), testSigningKey))
	require.NotEqual(t, base, SignV1("POST", "/x", 1, []byte("b"), testSigningKey))
}

// captureSigned makes one signed POST call, with the headers a node sends
// on a job's call, and returns what arrived.
func captureSigned(t *testing.T) signedRequest {
	t.Helper()
	srv, seen := recordingServer(t, testSigningKey, time.Time{}, nil)
	body := []byte(`{"amount":10}`)
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/jobs/x?a=1", bytes.NewReader(body))
	require.NoError(t, err)
	for name, value := range map[string]string{HeaderJob: "1", HeaderNode: "node-a", HeaderToken: "1",
		HeaderAttempt: "1", HeaderIdempotencyKey: "key-1", HeaderDeadline: "2024-05-01T12:00:30.000Z",
		HeaderTimeoutMs: "30000", "Content-Type": "application/json"} {
		req.Header.Set(name, value)
	}
	SignRequest(req, body, testSigningKey, time.Now())
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusNoContent, res.StatusCode)
	got := <-seen
	require.NoError(t, got.verifyErr)
	return got
}

func TestVerifySignatureTampered(t *testing.T) {
	got := captureSigned(t)
	now := time.Now()

	// The untouched request verifies, twice (the body is put back).
	r := got.replay(got.method, got.requestURI, got.body)
	require.NoError(t, VerifySignature(r, testSigningKey, time.Minute, now))
	require.NoError(t, VerifySignature(r, testSigningKey, time.Minute, now))
	rest, err := io.ReadAll(r.Body)
	require.NoError(t, err)
	require.Equal(t, got.body, string(rest))

	tampered := map[string]*http.Request{
		"body":     got.replay(got.method, got.requestURI, `{"amount":1000}`),
		"no body":  got.replay(got.method, got.requestURI, ""),
		"path":     got.replay(got.method, "/jobs/y?a=1", got.body),
		"query":    got.replay(got.method, "/jobs/x?a=2", got.body),
		"no query": got.replay(got.method, "/jobs/x", got.body),
		"method":   got.replay(http.MethodPut, got.requestURI, got.body),
	}
	ts := got.replay(got.method, got.requestURI, got.body)
	stamp, _ := strconv.ParseInt(got.header.Get(HeaderTimestamp), 10, 64)
	ts.Header.Set(HeaderTimestamp, strconv.FormatInt(stamp+1, 10))
	tampered["timestamp"] = ts
	for name, r := range tampered {
		err := VerifySignature(r, testSigningKey, time.Minute, now)
		require.ErrorIs(t, err, ErrSignatureInvalid, name)
		require.NotErrorIs(t, err, ErrSignatureStale, name)
	}

	// Another key.
	r = got.replay(got.method, got.requestURI, got.body)
	require.ErrorIs(t, VerifySignature(r, []byte("some-other-key-0123"), time.Minute, now), ErrSignatureInvalid)
	// No key at all never verifies.
	r = got.replay(got.method, got.requestURI, got.body)
	require.ErrorIs(t, VerifySignature(r, nil, time.Minute, now), ErrSignatureInvalid)
}

func TestVerifySignatureMalformed(t *testing.T) {
	got := captureSigned(t)
	now := time.Now()
	sig := got.header.Get(HeaderSignature)
	hexSig := strings.TrimPrefix(sig, "v2=")
	stamp := got.header.Get(HeaderTimestamp)

	for name, set := range map[string]func(h http.Header){
		"v3 prefix":           func(h http.Header) { h.Set(HeaderSignature, "v3="+hexSig) },
		"v1 prefix":           func(h http.Header) { h.Set(HeaderSignature, "v1="+hexSig) },
		"no prefix":           func(h http.Header) { h.Set(HeaderSignature, hexSig) },
		"short":               func(h http.Header) { h.Set(HeaderSignature, sig[:len(sig)-2]) },
		"not hex":             func(h http.Header) { h.Set(HeaderSignature, "v2="+strings.Repeat("zz", 32)) },
		"two signatures":      func(h http.Header) { h.Add(HeaderSignature, sig) },
		"two timestamps":      func(h http.Header) { h.Add(HeaderTimestamp, stamp) },
		"signed timestamp":    func(h http.Header) { h.Set(HeaderTimestamp, "+"+stamp) },
		"leading zero":        func(h http.Header) { h.Set(HeaderTimestamp, "0"+stamp) },
		"fractional":          func(h http.Header) { h.Set(HeaderTimestamp, stamp+".5") },
		"milliseconds":        func(h http.Header) { h.Set(HeaderTimestamp, stamp+"000") },
		"uppercase other sig": func(h http.Header) { h.Set(HeaderSignature, "v2="+strings.Repeat("AB", 32)) },
	} {
		r := got.replay(got.method, got.requestURI, got.body)
		set(r.Header)
		err := VerifySignature(r, testSigningKey, time.Minute, now)
		if name == "milliseconds" {
			// Far in the future: refused as stale before the signature.
			require.ErrorIs(t, err, ErrSignatureStale, name)
			continue
		}
		require.ErrorIs(t, err, ErrSignatureInvalid, name)
	}
}

func TestVerifySignatureMissing(t *testing.T) {
	got := captureSigned(t)
	now := time.Now()
	for name, del := range map[string][]string{
		"both":      {HeaderTimestamp, HeaderSignature},
		"timestamp": {HeaderTimestamp},
		"signature": {HeaderSignature},
	} {
		r := got.replay(got.method, got.requestURI, got.body)
		for _, h := range del {
			r.Header.Del(h)
		}
		err := VerifySignature(r, testSigningKey, time.Minute, now)
		require.ErrorIs(t, err, ErrSignatureMissing, name)
		require.Contains(t, err.Error(), del[0])
	}
	r := got.replay(got.method, got.requestURI, got.body)
	r.Header.Set(HeaderSignature, "")
	require.ErrorIs(t, VerifySignature(r, testSigningKey, time.Minute, now), ErrSignatureMissing)
}

func TestVerifySignatureWindow(t *testing.T) {
	const ts = 1714572000
	signedAt := time.Unix(ts, 0)
	newReq := func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/jobs/x", strings.NewReader("b"))
		r.Header.Set(HeaderTimestamp, strconv.Itoa(ts))
		r.Header.Set(HeaderSignature, Sign(http.MethodPost, "/jobs/x", ts, nil, []byte("b"), testSigningKey))
		return r
	}
	for _, tc := range []struct {
		now    time.Time
		maxAge time.Duration
		stale  bool
	}{
		{signedAt, time.Minute, false},
		{signedAt.Add(time.Minute), time.Minute, false},
		{signedAt.Add(-time.Minute), time.Minute, false},
		{signedAt.Add(time.Minute + time.Second), time.Minute, true},
		{signedAt.Add(-time.Minute - time.Second), time.Minute, true}, // from the future
		{signedAt.Add(DefaultSignatureMaxAge), 0, false},              // 0: the default window
		{signedAt.Add(DefaultSignatureMaxAge + time.Second), 0, true},
	} {
		err := VerifySignature(newReq(), testSigningKey, tc.maxAge, tc.now)
		if tc.stale {
			require.ErrorIs(t, err, ErrSignatureStale, tc.now.Sub(signedAt))
		} else {
			require.NoError(t, err, tc.now.Sub(signedAt))
		}
	}
}

func TestVerifySignatureRequestTarget(t *testing.T) {
	ts := time.Now().Unix()
	sig := Sign(http.MethodPost, "/app/jobs/x?a=1", ts, nil, []byte("b"), testSigningKey)
	set := func(r *http.Request) *http.Request {
		r.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
		r.Header.Set(HeaderSignature, sig)
		return r
	}

	// Behind http.StripPrefix the URL changes but the request line does not.
	var err error
	h := http.StripPrefix("/app", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/jobs/x", r.URL.Path)
		err = VerifySignature(r, testSigningKey, time.Minute, time.Time{})
	}))
	h.ServeHTTP(httptest.NewRecorder(), set(httptest.NewRequest(http.MethodPost, "/app/jobs/x?a=1", strings.NewReader("b"))))
	require.NoError(t, err)

	// Absolute form, as a client talking to a proxy sends it.
	r := set(httptest.NewRequest(http.MethodPost, "http://localhost/app/jobs/x?a=1", strings.NewReader("b")))
	require.Equal(t, "http://localhost/app/jobs/x?a=1", r.RequestURI)
	require.NoError(t, VerifySignature(r, testSigningKey, time.Minute, time.Time{}))

	// No RequestURI (a request built by hand): the URL is used.
	r = set(httptest.NewRequest(http.MethodPost, "/app/jobs/x?a=1", strings.NewReader("b")))
	r.RequestURI = ""
	require.NoError(t, VerifySignature(r, testSigningKey, time.Minute, time.Time{}))
}

func TestVerifySignatureBodyReadError(t *testing.T) {
	ts := time.Now().Unix()
	r := httptest.NewRequest(http.MethodPost, "/jobs/x", nil)
	boom := errors.New("connection dropped")
	r.Body = io.NopCloser(io.MultiReader(strings.NewReader("partial"), errReader{boom}))
	r.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	r.Header.Set(HeaderSignature, Sign(http.MethodPost, "/jobs/x", ts, nil, []byte("partial"), testSigningKey))
	err := VerifySignature(r, testSigningKey, time.Minute, time.Time{})
	require.ErrorIs(t, err, boom)
	require.NotErrorIs(t, err, ErrSignatureInvalid)
	// The handler sees the same bytes and the same error.
	data, readErr := io.ReadAll(r.Body)
	require.Equal(t, "partial", string(data))
	require.ErrorIs(t, readErr, boom)
}

func TestVerifySignatureStaleMessage(t *testing.T) {
	now := time.Unix(1714572000, 0)
	for ts, want := range map[string]string{
		"1714571000":         "16m40s old",
		"1714573000":         "16m40s ahead",
		"999999999999999999": "is 2562047h47m16.854775807s ahead", // saturated, not negative
	} {
		r := httptest.NewRequest(http.MethodPost, "/x", nil)
		r.Header.Set(HeaderTimestamp, ts)
		r.Header.Set(HeaderSignature, "v1="+strings.Repeat("00", 32))
		err := VerifySignature(r, testSigningKey, time.Minute, now)
		require.ErrorIs(t, err, ErrSignatureStale)
		require.Contains(t, err.Error(), want)
	}
}

// signedAt builds a server-side request signed with key at ts, as v2 or v1.
func signedAt(t *testing.T, key []byte, ts int64, v1 bool, idempotencyKey string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/jobs/x?a=1", strings.NewReader(`{"n":1}`))
	r.Header.Set(HeaderIdempotencyKey, idempotencyKey)
	r.Header.Set(HeaderJob, "42")
	r.Header.Set(HeaderAttempt, "1")
	r.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	if v1 {
		r.Header.Set(HeaderSignature, SignV1(r.Method, r.RequestURI, ts, []byte(`{"n":1}`), key))
	} else {
		r.Header.Set(HeaderSignature, Sign(r.Method, r.RequestURI, ts, r.Header, []byte(`{"n":1}`), key))
	}
	return r
}

func TestVerifierV1AndKeyRotation(t *testing.T) {
	const ts = 1714572000
	at := func() time.Time { return time.Unix(ts, 0) }
	oldKey, newKey := []byte("the-old-key-0123456"), testSigningKey

	// A node before v2 signatures: refused unless v1 is accepted.
	v1 := signedAt(t, newKey, ts, true, "k")
	err := (&Verifier{Keys: [][]byte{newKey}, Now: at}).Verify(v1)
	require.ErrorIs(t, err, ErrSignatureInvalid)
	require.Contains(t, err.Error(), "v1 is not accepted")
	require.ErrorIs(t, VerifySignature(signedAt(t, newKey, ts, true, "k"), newKey, time.Minute, at()), ErrSignatureInvalid)
	accepting := &Verifier{Keys: [][]byte{newKey, oldKey}, AcceptV1: true, Now: at}
	require.NoError(t, accepting.Verify(signedAt(t, newKey, ts, true, "k")))
	require.NoError(t, accepting.Verify(signedAt(t, oldKey, ts, true, "k")))
	// v1 covers no header: that is why it is refused by default.
	r := signedAt(t, newKey, ts, true, "k")
	r.Header.Set(HeaderIdempotencyKey, "fresh")
	require.NoError(t, accepting.Verify(r))
	// A tampered v1 call is still refused, and v2 still verifies.
	r = signedAt(t, newKey, ts, true, "k")
	r.Header.Set(HeaderTimestamp, strconv.Itoa(ts+1))
	require.ErrorIs(t, accepting.Verify(r), ErrSignatureInvalid)
	require.NoError(t, accepting.Verify(signedAt(t, newKey, ts, false, "k")))

	// Rotation: the current and the previous key both verify, others not.
	both := &Verifier{Keys: [][]byte{newKey, oldKey}, Now: at}
	require.NoError(t, both.Verify(signedAt(t, newKey, ts, false, "k")))
	require.NoError(t, both.Verify(signedAt(t, oldKey, ts, false, "k")))
	require.ErrorIs(t, both.Verify(signedAt(t, []byte("some-other-key-0123"), ts, false, "k")), ErrSignatureInvalid)
	require.ErrorIs(t, (&Verifier{Keys: [][]byte{newKey}, Now: at}).Verify(signedAt(t, oldKey, ts, false, "k")),
		ErrSignatureInvalid)
	require.ErrorIs(t, (&Verifier{Keys: [][]byte{nil, {}}, Now: at}).Verify(signedAt(t, newKey, ts, false, "k")),
		ErrSignatureInvalid)
	require.ErrorIs(t, (&Verifier{Now: at}).Verify(signedAt(t, newKey, ts, false, "k")), ErrSignatureInvalid)
}

func TestVerifierRefusesReplays(t *testing.T) {
	got := captureSigned(t)
	stamp, err := strconv.ParseInt(got.header.Get(HeaderTimestamp), 10, 64)
	require.NoError(t, err)
	clk := clock.NewFake(time.Unix(stamp, 0))
	v := &Verifier{Keys: [][]byte{testSigningKey}, MaxAge: 5 * time.Minute, Replays: NewReplayCache(0), Now: clk.Now}

	require.NoError(t, v.Verify(got.replay(got.method, got.requestURI, got.body)))
	clk.Advance(4 * time.Minute)
	err = v.Verify(got.replay(got.method, got.requestURI, got.body))
	require.ErrorIs(t, err, ErrSignatureReplayed, "the same call again, within the window")
	require.NotErrorIs(t, err, ErrSignatureInvalid)
	// Under a fresh Idempotency-Key it is not even a valid signature.
	r := got.replay(got.method, got.requestURI, got.body)
	r.Header.Set(HeaderIdempotencyKey, "fresh-key")
	require.ErrorIs(t, v.Verify(r), ErrSignatureInvalid)
	// A replay is refused whatever key of a rotation signed it.
	rotating := &Verifier{Keys: [][]byte{[]byte("the-new-key-0123456"), testSigningKey}, Replays: v.Replays, Now: clk.Now}
	require.ErrorIs(t, rotating.Verify(got.replay(got.method, got.requestURI, got.body)), ErrSignatureReplayed)
	// Once the window is over, the timestamp refuses it and the cache
	// forgets it.
	clk.Advance(time.Minute + time.Second)
	require.ErrorIs(t, v.Verify(got.replay(got.method, got.requestURI, got.body)), ErrSignatureStale)
	require.NoError(t, v.Verify(signedAt(t, testSigningKey, clk.Now().Unix(), false, "next")))
	require.Equal(t, 1, v.Replays.(*ReplayCache).Len())

	// With v1 accepted, the cache also stops a v1 replay under a fresh
	// Idempotency-Key: the signature is the same.
	v.AcceptV1 = true
	require.NoError(t, v.Verify(signedAt(t, testSigningKey, clk.Now().Unix(), true, "a")))
	require.ErrorIs(t, v.Verify(signedAt(t, testSigningKey, clk.Now().Unix(), true, "b")), ErrSignatureReplayed)

	// Without a cache, a replay verifies (the endpoint's dedupe by
	// Idempotency-Key, which v2 now signs, must catch it).
	clk.Advance(time.Minute)
	fresh := signedAt(t, testSigningKey, clk.Now().Unix(), false, "k")
	v.Replays = nil
	require.NoError(t, v.Verify(fresh))
	require.NoError(t, v.Verify(fresh))
}

func TestVerifierReplayConcurrent(t *testing.T) {
	const ts = 1714572000
	v := &Verifier{Keys: [][]byte{testSigningKey}, Replays: NewReplayCache(10), Now: func() time.Time { return time.Unix(ts, 0) }}
	errs := make(chan error, 8)
	for range cap(errs) {
		go func() { errs <- v.Verify(signedAt(t, testSigningKey, ts, false, "k")) }()
	}
	accepted := 0
	for range cap(errs) {
		if err := <-errs; err == nil {
			accepted++
		} else {
			require.ErrorIs(t, err, ErrSignatureReplayed)
		}
	}
	require.Equal(t, 1, accepted)
}

func TestReplayCacheBounded(t *testing.T) {
	ctx := context.Background()
	t0 := time.Unix(1714572000, 0)
	c := NewReplayCache(2)
	for id, ttl := range map[string]time.Duration{"a": 5 * time.Minute, "b": 3 * time.Minute} {
		first, err := c.FirstUse(ctx, id, t0, t0.Add(ttl))
		require.NoError(t, err)
		require.True(t, first, id)
	}
	first, err := c.FirstUse(ctx, "c", t0, t0.Add(4*time.Minute))
	require.NoError(t, err)
	require.True(t, first)
	require.Equal(t, 2, c.Len())
	// Full, it forgot the entry closest to going stale ("b"), not the others.
	for _, id := range []string{"a", "c"} {
		first, err := c.FirstUse(ctx, id, t0, t0.Add(time.Hour))
		require.NoError(t, err)
		require.False(t, first, id)
	}
	// Entries go when they expire: "c" at t0+4m, "a" at t0+5m.
	later := t0.Add(4*time.Minute + time.Second)
	first, err = c.FirstUse(ctx, "a", later, t0.Add(10*time.Minute))
	require.NoError(t, err)
	require.False(t, first, "still within its window")
	require.Equal(t, 1, c.Len(), "c expired")
	first, err = c.FirstUse(ctx, "c", later, t0.Add(10*time.Minute))
	require.NoError(t, err)
	require.True(t, first, "expired, then recorded afresh")
}
