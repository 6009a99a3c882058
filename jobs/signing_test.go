package jobs

import (
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

func TestSignKnownAnswer(t *testing.T) {
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
		got := Sign(tc.method, tc.uri, tc.ts, body, testSigningKey)
		require.Equal(t, "v1="+tc.want, got)
	}
	// Every input matters.
	base := Sign("POST", "/x", 1, []byte("b"), testSigningKey)
	require.NotEqual(t, base, Sign("PUT", "/x", 1, []byte("b"), testSigningKey))
	require.NotEqual(t, base, Sign("POST", "/y", 1, []byte("b"), testSigningKey))
	require.NotEqual(t, base, Sign("POST", "/x", 2, []byte("b"), testSigningKey))
	require.NotEqual(t, base, Sign("POST", "/x", 1, []byte("c"), testSigningKey))
	require.NotEqual(t, base, Sign("POST", "/x", 1, []byte("b"), []byte("another-key-0123456")))
}

func TestInvokeSignedCallVerifies(t *testing.T) {
	fixed := time.Now().Truncate(time.Second).Add(-30 * time.Second) // a little behind the endpoint
	srv, seen := recordingServer(t, testSigningKey, time.Time{}, nil)
	inv := &Invoker{Base: mustURL(t, srv.URL+"/app"), Now: func() time.Time { return fixed }, SigningKey: testSigningKey}

	cases := []struct {
		method, endpoint, payload, wantURI string
	}{
		{"POST", "/jobs/x?day=2024-05-01&b=%20c&b=d", `{"n":1}`, "/app/jobs/x?day=2024-05-01&b=%20c&b=d"},
		{"", "/jobs/a%2Fb?q=\u00e9 x", "plain text", "/app/jobs/a%2Fb?q=%C3%A9%20x"},
		{"get", "/jobs/ping", "", "/app/jobs/ping"},
		{"DELETE", "/jobs/y", `[1,2]`, "/app/jobs/y"},
	}
	for _, tc := range cases {
		c := baseCall()
		c.Method, c.Endpoint, c.Payload = tc.method, tc.endpoint, []byte(tc.payload)
		res := inv.Invoke(context.Background(), c)
		require.Equal(t, Succeeded, res.Verdict, res.Err)
		got := <-seen
		require.NoError(t, got.verifyErr, tc.endpoint)
		require.Equal(t, tc.wantURI, got.requestURI)
		require.Equal(t, tc.payload, got.body)
		require.Equal(t, tc.payload, got.bodyAfter, "the body is restored after verifying")
		require.Equal(t, strconv.FormatInt(fixed.Unix(), 10), got.header.Get(HeaderTimestamp))
		require.Equal(t, Sign(got.method, tc.wantURI, fixed.Unix(), []byte(tc.payload), testSigningKey),
			got.header.Get(HeaderSignature))
		require.Regexp(t, `^v1=[0-9a-f]{64}$`, got.header.Get(HeaderSignature))
	}
}

// captureSigned makes one signed POST call and returns what arrived.
func captureSigned(t *testing.T) signedRequest {
	t.Helper()
	srv, seen := recordingServer(t, testSigningKey, time.Time{}, nil)
	inv := &Invoker{Base: mustURL(t, srv.URL), SigningKey: testSigningKey}
	c := baseCall()
	c.Endpoint, c.Payload = "/jobs/x?a=1", []byte(`{"amount":10}`)
	res := inv.Invoke(context.Background(), c)
	require.Equal(t, Succeeded, res.Verdict, res.Err)
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
	hexSig := strings.TrimPrefix(sig, "v1=")
	stamp := got.header.Get(HeaderTimestamp)

	for name, set := range map[string]func(h http.Header){
		"v2 prefix":           func(h http.Header) { h.Set(HeaderSignature, "v2="+hexSig) },
		"no prefix":           func(h http.Header) { h.Set(HeaderSignature, hexSig) },
		"short":               func(h http.Header) { h.Set(HeaderSignature, sig[:len(sig)-2]) },
		"not hex":             func(h http.Header) { h.Set(HeaderSignature, "v1="+strings.Repeat("zz", 32)) },
		"two signatures":      func(h http.Header) { h.Add(HeaderSignature, sig) },
		"two timestamps":      func(h http.Header) { h.Add(HeaderTimestamp, stamp) },
		"signed timestamp":    func(h http.Header) { h.Set(HeaderTimestamp, "+"+stamp) },
		"leading zero":        func(h http.Header) { h.Set(HeaderTimestamp, "0"+stamp) },
		"fractional":          func(h http.Header) { h.Set(HeaderTimestamp, stamp+".5") },
		"milliseconds":        func(h http.Header) { h.Set(HeaderTimestamp, stamp+"000") },
		"uppercase other sig": func(h http.Header) { h.Set(HeaderSignature, "v1="+strings.Repeat("AB", 32)) },
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

	// An unsigned call, end to end.
	srv, seen := recordingServer(t, testSigningKey, time.Time{}, nil)
	res := newInvoker(t, srv).Invoke(context.Background(), baseCall())
	require.Equal(t, Succeeded, res.Verdict, res.Err)
	require.ErrorIs(t, (<-seen).verifyErr, ErrSignatureMissing)
}

func TestInvokeSignedStale(t *testing.T) {
	past := time.Date(2001, 9, 9, 1, 46, 40, 0, time.UTC)
	srv, seen := recordingServer(t, testSigningKey, time.Time{}, nil)
	inv := &Invoker{Base: mustURL(t, srv.URL), Now: func() time.Time { return past }, SigningKey: testSigningKey}
	res := inv.Invoke(context.Background(), baseCall())
	require.Equal(t, Succeeded, res.Verdict, res.Err)
	got := <-seen
	require.Equal(t, "1000000000", got.header.Get(HeaderTimestamp))
	require.ErrorIs(t, got.verifyErr, ErrSignatureStale)
	require.NotErrorIs(t, got.verifyErr, ErrSignatureInvalid)

	// The same request is fine at the time it was signed...
	r := got.replay(got.method, got.requestURI, got.body)
	require.NoError(t, VerifySignature(r, testSigningKey, 5*time.Minute, past.Add(time.Minute)))
}

func TestVerifySignatureWindow(t *testing.T) {
	const ts = 1714572000
	signedAt := time.Unix(ts, 0)
	newReq := func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/jobs/x", strings.NewReader("b"))
		r.Header.Set(HeaderTimestamp, strconv.Itoa(ts))
		r.Header.Set(HeaderSignature, Sign(http.MethodPost, "/jobs/x", ts, []byte("b"), testSigningKey))
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

func TestInvokeUnsignedSendsNoSignatureHeaders(t *testing.T) {
	srv, seen := recordingServer(t, testSigningKey, time.Time{}, nil)
	for _, key := range [][]byte{nil, {}} {
		inv := &Invoker{Base: mustURL(t, srv.URL), SigningKey: key}
		c := baseCall()
		c.Payload = []byte(`{"a":1}`)
		// Not even when the call asks for them.
		c.Headers = map[string]string{"x-slotpoller-signature": "v1=forged", HeaderTimestamp: "1"}
		res := inv.Invoke(context.Background(), c)
		require.Equal(t, Succeeded, res.Verdict, res.Err)
		got := <-seen
		require.Empty(t, got.header.Values(HeaderTimestamp))
		require.Empty(t, got.header.Values(HeaderSignature))
	}
}

func TestInvokeSignatureHeadersReserved(t *testing.T) {
	fixed := time.Now().Truncate(time.Second)
	srv, seen := recordingServer(t, testSigningKey, time.Time{}, nil)
	inv := &Invoker{Base: mustURL(t, srv.URL), Now: func() time.Time { return fixed }, SigningKey: testSigningKey}
	c := baseCall()
	c.Payload = []byte(`{"a":1}`)
	c.Headers = map[string]string{
		"x-slotpoller-signature": "v1=" + strings.Repeat("00", 32),
		"X-SLOTPOLLER-TIMESTAMP": "1",
		"X-Custom":               "kept",
	}
	res := inv.Invoke(context.Background(), c)
	require.Equal(t, Succeeded, res.Verdict, res.Err)
	got := <-seen
	require.NoError(t, got.verifyErr)
	require.Equal(t, []string{strconv.FormatInt(fixed.Unix(), 10)}, got.header.Values(HeaderTimestamp))
	require.Equal(t, []string{Sign(http.MethodPost, "/jobs/x", fixed.Unix(), c.Payload, testSigningKey)},
		got.header.Values(HeaderSignature))
	require.Equal(t, "kept", got.header.Get("X-Custom"))
}

func TestInvokeSignedRedirect(t *testing.T) {
	redirect := func(w http.ResponseWriter, r *http.Request) bool {
		switch r.URL.Path {
		case "/temporary":
			http.Redirect(w, r, "/jobs/new?from=temp", http.StatusTemporaryRedirect) // keeps method and body
		case "/found":
			http.Redirect(w, r, "/jobs/new?from=found", http.StatusFound) // POST becomes a body-less GET
		default:
			return false
		}
		return true
	}
	for _, tc := range []struct {
		endpoint, wantMethod, wantURI, wantBody string
	}{
		{"/temporary", http.MethodPost, "/jobs/new?from=temp", `{"a":1}`},
		{"/found", http.MethodGet, "/jobs/new?from=found", ""},
	} {
		for _, key := range [][]byte{testSigningKey, nil} {
			srv, seen := recordingServer(t, testSigningKey, time.Time{}, redirect)
			inv := &Invoker{Base: mustURL(t, srv.URL), SigningKey: key}
			c := baseCall()
			c.Endpoint, c.Payload = tc.endpoint, []byte(`{"a":1}`)
			res := inv.Invoke(context.Background(), c)
			require.Equal(t, Succeeded, res.Verdict, res.Err)
			got := <-seen
			require.Equal(t, tc.wantMethod, got.method)
			require.Equal(t, tc.wantURI, got.requestURI)
			require.Equal(t, tc.wantBody, got.body)
			if key == nil {
				require.ErrorIs(t, got.verifyErr, ErrSignatureMissing)
			} else {
				require.NoError(t, got.verifyErr, "the redirected request is signed for itself")
			}
		}
	}
}

func TestVerifySignatureRequestTarget(t *testing.T) {
	ts := time.Now().Unix()
	sig := Sign(http.MethodPost, "/app/jobs/x?a=1", ts, []byte("b"), testSigningKey)
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
	r.Header.Set(HeaderSignature, Sign(http.MethodPost, "/jobs/x", ts, []byte("partial"), testSigningKey))
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
