package jobs

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/callproto"
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
		verifyErr := callproto.VerifySignature(r, key, 5*time.Minute, now)
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
		require.Equal(t, strconv.FormatInt(fixed.Unix(), 10), got.header.Get(callproto.HeaderTimestamp))
		require.Equal(t, callproto.Sign(got.method, tc.wantURI, fixed.Unix(), got.header, []byte(tc.payload), testSigningKey),
			got.header.Get(callproto.HeaderSignature))
		require.Regexp(t, `^v2=[0-9a-f]{64}$`, got.header.Get(callproto.HeaderSignature))
	}
}

// A call without a signing key is refused as unsigned.
func TestInvokeUnsignedCallIsMissingItsSignature(t *testing.T) {
	srv, seen := recordingServer(t, testSigningKey, time.Time{}, nil)
	res := newInvoker(t, srv).Invoke(context.Background(), baseCall())
	require.Equal(t, Succeeded, res.Verdict, res.Err)
	require.ErrorIs(t, (<-seen).verifyErr, callproto.ErrSignatureMissing)
}

func TestInvokeSignedStale(t *testing.T) {
	past := time.Date(2001, 9, 9, 1, 46, 40, 0, time.UTC)
	srv, seen := recordingServer(t, testSigningKey, time.Time{}, nil)
	inv := &Invoker{Base: mustURL(t, srv.URL), Now: func() time.Time { return past }, SigningKey: testSigningKey}
	res := inv.Invoke(context.Background(), baseCall())
	require.Equal(t, Succeeded, res.Verdict, res.Err)
	got := <-seen
	require.Equal(t, "1000000000", got.header.Get(callproto.HeaderTimestamp))
	require.ErrorIs(t, got.verifyErr, callproto.ErrSignatureStale)
	require.NotErrorIs(t, got.verifyErr, callproto.ErrSignatureInvalid)

	// The same request is fine at the time it was signed...
	r := got.replay(got.method, got.requestURI, got.body)
	require.NoError(t, callproto.VerifySignature(r, testSigningKey, 5*time.Minute, past.Add(time.Minute)))
}

func TestInvokeUnsignedSendsNoSignatureHeaders(t *testing.T) {
	srv, seen := recordingServer(t, testSigningKey, time.Time{}, nil)
	for _, key := range [][]byte{nil, {}} {
		inv := &Invoker{Base: mustURL(t, srv.URL), SigningKey: key}
		c := baseCall()
		c.Payload = []byte(`{"a":1}`)
		// Not even when the call asks for them.
		c.Headers = map[string]string{"x-slotpoller-signature": "v1=forged", callproto.HeaderTimestamp: "1"}
		res := inv.Invoke(context.Background(), c)
		require.Equal(t, Succeeded, res.Verdict, res.Err)
		got := <-seen
		require.Empty(t, got.header.Values(callproto.HeaderTimestamp))
		require.Empty(t, got.header.Values(callproto.HeaderSignature))
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
	require.Equal(t, []string{strconv.FormatInt(fixed.Unix(), 10)}, got.header.Values(callproto.HeaderTimestamp))
	require.Equal(t, []string{callproto.Sign(http.MethodPost, "/jobs/x", fixed.Unix(), got.header, c.Payload, testSigningKey)},
		got.header.Values(callproto.HeaderSignature))
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
				require.ErrorIs(t, got.verifyErr, callproto.ErrSignatureMissing)
			} else {
				require.NoError(t, got.verifyErr, "the redirected request is signed for itself")
			}
		}
	}
}

// The invoker's client, with its redirect guard, is built once: each
// redirected call must still be signed over its own body, not the first
// call's.
func TestInvokeSignedRedirectsOfOneInvokerCarryTheirOwnBodies(t *testing.T) {
	redirect := func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/temporary" {
			return false
		}
		http.Redirect(w, r, "/jobs/new", http.StatusTemporaryRedirect)
		return true
	}
	srv, seen := recordingServer(t, testSigningKey, time.Time{}, redirect)
	inv := &Invoker{Base: mustURL(t, srv.URL), SigningKey: testSigningKey}
	for _, body := range []string{`{"first":1}`, `{"second":2}`, `{"third":3}`} {
		c := baseCall()
		c.Endpoint, c.Payload = "/temporary", []byte(body)
		res := inv.Invoke(context.Background(), c)
		require.Equal(t, Succeeded, res.Verdict, res.Err)
		got := <-seen
		require.Equal(t, body, got.body)
		require.NoError(t, got.verifyErr, "the redirect of %s is signed over its own body", body)
	}
}

func TestVerifySignatureCoversHeaders(t *testing.T) {
	// A job call (X-Slotpoller-Task and -Scheduled-For absent) and a
	// scheduled task-style call (X-Slotpoller-Job absent), as sent.
	srv, seen := recordingServer(t, testSigningKey, time.Time{}, nil)
	inv := &Invoker{Base: mustURL(t, srv.URL), SigningKey: testSigningKey}
	jobCall := baseCall()
	jobCall.Payload = []byte(`{"amount":10}`)
	taskCall := baseCall()
	taskCall.Task, taskCall.IdempotencyKey = "mailer", "slotpoller-task-mailer-1-1"
	taskCall.Headers = map[string]string{callproto.HeaderScheduledFor: "2024-05-01T12:00:00Z"}
	var calls []signedRequest
	for _, c := range []Call{jobCall, taskCall} {
		res := inv.Invoke(context.Background(), c)
		require.Equal(t, Succeeded, res.Verdict, res.Err)
		got := <-seen
		require.NoError(t, got.verifyErr)
		calls = append(calls, got)
	}
	now := time.Now()

	for _, got := range calls {
		for _, name := range callproto.SignedHeaders() {
			tamper := map[string]func(http.Header){
				"repeated": func(h http.Header) { h.Add(name, h.Get(name)) },
			}
			if len(got.header.Values(name)) > 0 {
				tamper["changed"] = func(h http.Header) { h.Set(name, h.Get(name)+"9") }
				tamper["emptied"] = func(h http.Header) { h.Set(name, "") }
				tamper["removed"] = func(h http.Header) { h.Del(name) }
			} else {
				tamper["added"] = func(h http.Header) { h.Set(name, "1") }
				tamper["added empty"] = func(h http.Header) { h.Set(name, "") }
			}
			for how, change := range tamper {
				r := got.replay(got.method, got.requestURI, got.body)
				change(r.Header)
				err := callproto.VerifySignature(r, testSigningKey, time.Minute, now)
				require.ErrorIs(t, err, callproto.ErrSignatureInvalid, "%s %s", name, how)
			}
		}
		// Headers outside the list are not signed: a proxy may change them.
		r := got.replay(got.method, got.requestURI, got.body)
		r.Header.Set("User-Agent", "curl")
		r.Header.Set("X-Forwarded-For", "10.0.0.1")
		require.NoError(t, callproto.VerifySignature(r, testSigningKey, time.Minute, now))
	}
	require.Equal(t, "mailer", calls[1].header.Get(callproto.HeaderTask))
	require.NotEmpty(t, calls[1].header.Get(callproto.HeaderScheduledFor))
	require.Empty(t, calls[1].header.Values(callproto.HeaderJob))
}
