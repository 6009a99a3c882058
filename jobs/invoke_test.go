package jobs

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/callproto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	require.NoError(t, err)
	return u
}

func newInvoker(t *testing.T, srv *httptest.Server) *Invoker {
	t.Helper()
	return &Invoker{Base: mustURL(t, srv.URL)}
}

func baseCall() Call {
	return Call{
		JobID:          42,
		Node:           "web-01",
		Token:          7,
		Attempt:        3,
		IdempotencyKey: "run-42",
		Traceparent:    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		Endpoint:       "/jobs/x",
		Timeout:        5 * time.Second,
	}
}

type seenRequest struct {
	method string
	path   string
	query  string
	header http.Header
	body   string
}

func TestInvokeSendsHeaders(t *testing.T) {
	seen := make(chan seenRequest, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen <- seenRequest{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), string(body)}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)

	fixed := time.Date(2024, 5, 1, 14, 0, 0, 123_456_789, time.FixedZone("CEST", 2*3600))
	inv := &Invoker{Base: mustURL(t, srv.URL+"/app/"), Now: func() time.Time { return fixed }}

	c := baseCall()
	c.Endpoint = "/jobs/x?y=1"
	c.Timeout = 30 * time.Second
	c.Payload = []byte(`{"a":1}`)
	c.Headers = map[string]string{
		"X-Slotpoller-Task":  "feed-1",
		"X-Slotpoller-Token": "999", // reserved: must not win
	}

	res := inv.Invoke(context.Background(), c)
	require.Equal(t, Succeeded, res.Verdict, res.Err)
	require.Equal(t, http.StatusOK, res.Status)
	require.Empty(t, res.Err)

	got := <-seen
	require.Equal(t, http.MethodPost, got.method)
	require.Equal(t, "/app/jobs/x", got.path)
	require.Equal(t, "y=1", got.query)
	require.Equal(t, `{"a":1}`, got.body)
	h := got.header
	require.Equal(t, "42", h.Get("X-Slotpoller-Job"))
	require.Equal(t, "web-01", h.Get("X-Slotpoller-Node"))
	require.Equal(t, []string{"7"}, h.Values("X-Slotpoller-Token"))
	require.Equal(t, "3", h.Get("X-Slotpoller-Attempt"))
	require.Equal(t, "run-42", h.Get("Idempotency-Key"))
	require.Equal(t, "2024-05-01T12:00:30.123Z", h.Get("X-Slotpoller-Deadline"))
	require.Equal(t, "30000", h.Get("X-Slotpoller-Timeout-Ms"))
	require.Equal(t, "slotpoller", h.Get("User-Agent"))
	require.Equal(t, "application/json", h.Get("Content-Type"))
	require.Equal(t, "feed-1", h.Get("X-Slotpoller-Task"))
}

// Every reserved header carries the call's own value whatever the job's
// extra headers say, however they spell its name: the invoker sets the
// reserved ones by their canonical names, after the extra ones.
func TestInvokeReservedHeadersWinInAnySpelling(t *testing.T) {
	reserved := []string{callproto.HeaderJob, callproto.HeaderNode, callproto.HeaderToken, callproto.HeaderAttempt, callproto.HeaderIdempotencyKey, callproto.HeaderDeadline, callproto.HeaderTimeoutMs, callproto.HeaderTraceparent}
	for _, name := range append(reserved, callproto.HeaderTask, callproto.HeaderTimestamp, callproto.HeaderSignature) {
		require.Equal(t, textproto.CanonicalMIMEHeaderKey(name), name, "the invoker sets %s without canonicalizing it", name)
	}
	seen := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
	}))
	t.Cleanup(srv.Close)
	fixed := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	inv := &Invoker{Base: mustURL(t, srv.URL), Now: func() time.Time { return fixed }}
	for _, spell := range []func(string) string{strings.ToLower, strings.ToUpper} {
		c := baseCall()
		c.Headers = map[string]string{}
		for _, name := range reserved {
			c.Headers[spell(name)] = "forged"
		}
		res := inv.Invoke(context.Background(), c)
		require.Equal(t, Succeeded, res.Verdict, res.Err)
		h := <-seen
		for _, name := range reserved {
			require.Len(t, h.Values(name), 1, name)
			require.NotEqual(t, "forged", h.Get(name), name)
		}
		require.Equal(t, "42", h.Get(callproto.HeaderJob))
		require.Equal(t, "run-42", h.Get(callproto.HeaderIdempotencyKey))
		require.Equal(t, baseCall().Traceparent, h.Get("traceparent"))
	}
}

func TestInvokeContentTypeAndMethod(t *testing.T) {
	seen := make(chan seenRequest, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen <- seenRequest{method: r.Method, header: r.Header.Clone(), body: string(body)}
	}))
	t.Cleanup(srv.Close)
	inv := newInvoker(t, srv)

	tests := []struct {
		name        string
		method      string
		payload     string
		wantMethod  string
		contentType string
	}{
		{"json", "", `[1,2]`, "POST", "application/json"},
		{"text", "put", `hello`, "PUT", "text/plain; charset=utf-8"},
		{"empty", "GET", ``, "GET", ""},
		{"patch", "PATCH", `{}`, "PATCH", "application/json"},
		{"delete", "DELETE", ``, "DELETE", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := baseCall()
			c.Method = tt.method
			c.Payload = []byte(tt.payload)
			res := inv.Invoke(context.Background(), c)
			require.Equal(t, Succeeded, res.Verdict, res.Err)
			got := <-seen
			require.Equal(t, tt.wantMethod, got.method)
			require.Equal(t, tt.contentType, got.header.Get("Content-Type"))
			require.Equal(t, tt.payload, got.body)
		})
	}
}

func TestInvokeDefaultIdempotencyKey(t *testing.T) {
	seen := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Idempotency-Key")
	}))
	t.Cleanup(srv.Close)
	c := baseCall()
	c.IdempotencyKey = ""
	res := newInvoker(t, srv).Invoke(context.Background(), c)
	require.Equal(t, Succeeded, res.Verdict, res.Err)
	require.Equal(t, "slotpoller-job-42", <-seen)
}

func TestInvokeClassifiesStatus(t *testing.T) {
	tests := []struct {
		status  int
		verdict Verdict
	}{
		{200, Succeeded},
		{201, Succeeded},
		{204, Succeeded},
		{500, Retry},
		{502, Retry},
		{503, Retry},
		{408, Retry},
		{429, Retry},
		{400, Fail},
		{404, Fail},
		{410, Fail},
		{422, Fail},
		{304, Fail},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.status), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
			}))
			t.Cleanup(srv.Close)
			res := newInvoker(t, srv).Invoke(context.Background(), baseCall())
			require.Equal(t, tt.verdict, res.Verdict, res.Err)
			require.Equal(t, tt.status, res.Status)
			if tt.verdict == Succeeded {
				require.Empty(t, res.Err)
			} else {
				require.Contains(t, res.Err, "endpoint answered ")
			}
		})
	}
}

func TestInvokeErrorIncludesBodySnippet(t *testing.T) {
	long := strings.Repeat("x", 300)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/short":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "down for maintenance\n")
		case "/long":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, long)
		case "/huge":
			// More than the 64 KiB the invoker reads.
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, strings.Repeat("y", 1<<20))
		}
	}))
	t.Cleanup(srv.Close)
	inv := newInvoker(t, srv)

	c := baseCall()
	c.Endpoint = "/short"
	res := inv.Invoke(context.Background(), c)
	require.Equal(t, Retry, res.Verdict)
	require.Equal(t, "endpoint answered 503 Service Unavailable: down for maintenance", res.Err)

	c.Endpoint = "/long"
	res = inv.Invoke(context.Background(), c)
	require.Equal(t, Fail, res.Verdict)
	require.Equal(t, "endpoint answered 400 Bad Request: "+long[:200], res.Err)

	c.Endpoint = "/huge"
	res = inv.Invoke(context.Background(), c)
	require.Equal(t, Retry, res.Verdict)
	require.Equal(t, "endpoint answered 500 Internal Server Error: "+strings.Repeat("y", 200), res.Err)
}

func TestInvokeTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // slower than any timeout; ends when the client gives up
	}))
	t.Cleanup(srv.Close)

	c := baseCall()
	c.Timeout = 50 * time.Millisecond
	res := newInvoker(t, srv).Invoke(context.Background(), c)
	require.Equal(t, Retry, res.Verdict)
	require.Equal(t, 0, res.Status)
	require.Equal(t, "timed out after 50ms", res.Err)
	require.GreaterOrEqual(t, res.Duration, 50*time.Millisecond)
}

func TestInvokeConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there any more

	inv := &Invoker{Base: mustURL(t, "http://"+addr)}
	res := inv.Invoke(context.Background(), baseCall())
	require.Equal(t, Retry, res.Verdict)
	require.Equal(t, 0, res.Status)
	require.Equal(t, "connection refused to http://"+addr+"/jobs/x", res.Err)
}

func TestInvokeConnectionClosedRetries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	res := newInvoker(t, srv).Invoke(context.Background(), baseCall())
	require.Equal(t, Retry, res.Verdict)
	require.Equal(t, 0, res.Status)
	require.NotEmpty(t, res.Err)
}

func TestInvokeCallerCancelWithCause(t *testing.T) {
	started := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithCancelCause(context.Background())
	go func() {
		<-started
		cancel(errors.New("lease lost"))
	}()
	c := baseCall()
	c.Timeout = time.Minute
	res := newInvoker(t, srv).Invoke(ctx, c)
	require.Equal(t, Retry, res.Verdict)
	require.Equal(t, "cancelled: lease lost", res.Err)
}

func TestInvokeCallerCancelWithoutCause(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := newInvoker(t, srv).Invoke(ctx, baseCall())
	require.Equal(t, Retry, res.Verdict)
	require.Equal(t, "cancelled: context canceled", res.Err)
}

func TestInvokeRefusesRedirectToAnotherHost(t *testing.T) {
	var evilHits atomic.Int32
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		evilHits.Add(1)
	}))
	t.Cleanup(evil.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, evil.URL+"/steal", http.StatusFound)
		case "/here":
			http.Redirect(w, r, "/there", http.StatusTemporaryRedirect)
		case "/there":
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(srv.Close)

	for name, client := range map[string]*http.Client{
		"default client": nil,
		"own client":     {}, // follows any redirect by itself
	} {
		t.Run(name, func(t *testing.T) {
			inv := &Invoker{Base: mustURL(t, srv.URL), Client: client}

			c := baseCall()
			c.Endpoint = "/away"
			res := inv.Invoke(context.Background(), c)
			require.Equal(t, Fail, res.Verdict)
			require.Equal(t, http.StatusFound, res.Status)
			require.Contains(t, res.Err, "redirected to another host")
			require.Zero(t, evilHits.Load())

			c.Endpoint = "/here" // same host: followed
			c.Payload = []byte(`{"x":1}`)
			res = inv.Invoke(context.Background(), c)
			require.Equal(t, Succeeded, res.Verdict, res.Err)
			require.Equal(t, http.StatusNoContent, res.Status)
		})
	}
}

func TestInvokeRefusesBadCalls(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
	}))
	t.Cleanup(srv.Close)
	inv := newInvoker(t, srv)

	tests := map[string]func(*Call){
		"bad endpoint":    func(c *Call) { c.Endpoint = "http://evil/x" },
		"bad method":      func(c *Call) { c.Method = "CONNECT" },
		"no timeout":      func(c *Call) { c.Timeout = 0 },
		"bad header name": func(c *Call) { c.Headers = map[string]string{"X Bad": "v"} },
		"bad header value": func(c *Call) {
			c.Headers = map[string]string{"X-Ok": "a\r\nX-Injected: 1"}
		},
		// Values a row brings that no header can carry: a request that
		// cannot be built is no reason to retry.
		"idempotency key with CR/LF": func(c *Call) { c.IdempotencyKey = "k\r\nX-Injected: 1" },
		"idempotency key with a NUL": func(c *Call) { c.IdempotencyKey = "k\x00" },
		"task name with a newline":   func(c *Call) { c.Task = "feed\n" },
		"node name with a DEL":       func(c *Call) { c.Node = "node\x7f" },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			c := baseCall()
			mutate(&c)
			res := inv.Invoke(context.Background(), c)
			require.Equal(t, Fail, res.Verdict)
			require.NotEmpty(t, res.Err)
		})
	}
	require.Zero(t, hits.Load())

	res := (&Invoker{}).Invoke(context.Background(), baseCall())
	require.Equal(t, Retry, res.Verdict)
	require.Contains(t, res.Err, "no base URL")
}

func TestResolveEndpoint(t *testing.T) {
	good := []struct {
		base, endpoint, want string
	}{
		{"http://localhost", "/jobs/x", "http://localhost/jobs/x"},
		{"http://localhost/", "/jobs/x", "http://localhost/jobs/x"},
		{"http://localhost:8080/app", "/jobs/x", "http://localhost:8080/app/jobs/x"},
		{"http://localhost:8080/app/", "/jobs/x", "http://localhost:8080/app/jobs/x"},
		{"https://h/app", "/jobs/x?a=1&b=two", "https://h/app/jobs/x?a=1&b=two"},
		{"http://h", "/", "http://h/"},
		{"http://h", "/a/b.json", "http://h/a/b.json"},
		{"http://h", "/a%2Fb", "http://h/a%2Fb"},
		{"http://h", "/a..b/c", "http://h/a..b/c"},
		{"http://h", "/x?next=../../y", "http://h/x?next=../../y"},
		{"http://h", `/x?path=C:\tmp`, `http://h/x?path=C:%5Ctmp`},
		{"http://h", "/x?q=a b&r=%20", "http://h/x?q=a%20b&r=%20"},
		{"http://h", "/d%C3%A9j%C3%A0?x=é", "http://h/d%C3%A9j%C3%A0?x=%C3%A9"},
	}
	for _, tt := range good {
		t.Run("ok "+tt.base+tt.endpoint, func(t *testing.T) {
			base := mustURL(t, tt.base)
			got, err := ResolveEndpoint(base, tt.endpoint)
			require.NoError(t, err)
			require.Equal(t, tt.want, got.String())
			require.Equal(t, base.Host, got.Host)
			require.NoError(t, ValidateEndpoint(tt.endpoint))
		})
	}

	bad := []struct {
		endpoint, why string
	}{
		{"http://evil/x", "absolute URL"},
		{"HTTPS://evil/x", "absolute URL"},
		{"javascript:alert(1)", "absolute URL"},
		{"//evil/x", "scheme-relative"},
		{"/a/../../x", `".."`},
		{"/..", `".."`},
		{"/a/./b", `"."`},
		{"/a/%2e%2e/x", `".."`},
		{"/a/%2E%2e/x", `".."`},
		{"/a/%252e%252e/x", `".."`},
		{"/a%2f..%2fx", `".."`},
		{"/%2fevil/x", "encoded //"},
		{"/a%5c..", "backslash"},
		{`\evil`, "backslash"},
		{`/\evil`, "backslash"},
		{"", "empty"},
		{"x", "must start with /"},
		{"jobs/x", "must start with /"},
		{"/a#f", "fragment"},
		{"/a\n", "control character"},
		{"/a\x00b", "control character"},
		{"/a%00b", "control character"},
		{"/a%zz", "percent-encoding"},
	}
	base := mustURL(t, "http://localhost:8080/app")
	for _, tt := range bad {
		t.Run("refuse "+tt.endpoint, func(t *testing.T) {
			got, err := ResolveEndpoint(base, tt.endpoint)
			require.Error(t, err)
			require.Nil(t, got)
			require.Contains(t, err.Error(), tt.why)
			require.Error(t, ValidateEndpoint(tt.endpoint))
		})
	}

	_, err := ResolveEndpoint(nil, "/x")
	require.Error(t, err)
	_, err = ResolveEndpoint(mustURL(t, "ftp://h"), "/x")
	require.Error(t, err)
	_, err = ResolveEndpoint(mustURL(t, "/relative"), "/x")
	require.Error(t, err)
}

func TestBackoff(t *testing.T) {
	const base, max = time.Second, time.Minute
	low := func() float64 { return 0 }
	high := func() float64 { return 0.999 }

	tests := []struct {
		attempt int
		rnd     func() float64
		want    time.Duration
	}{
		// rnd = 0: exactly half of the uncapped-or-capped delay.
		{1, low, 500 * time.Millisecond},
		{2, low, 1 * time.Second},
		{3, low, 2 * time.Second},
		{4, low, 4 * time.Second},
		{6, low, 16 * time.Second},
		{7, low, 30 * time.Second}, // 64s capped to 60s
		{8, low, 30 * time.Second},
		{100, low, 30 * time.Second}, // no overflow
		// rnd = 0.999: just under the full delay.
		{1, high, 999500 * time.Microsecond},
		{2, high, 1999 * time.Millisecond},
		{3, high, 3998 * time.Millisecond},
		{6, high, 31984 * time.Millisecond},
		{7, high, 59970 * time.Millisecond},
		{1000, high, 59970 * time.Millisecond},
		// attempt < 1 counts as 1.
		{0, low, 500 * time.Millisecond},
	}
	for _, tt := range tests {
		got := Backoff(tt.attempt, base, max, tt.rnd)
		require.Equal(t, tt.want, got, "attempt %d rnd %v", tt.attempt, tt.rnd())
	}
}

func TestBackoffBounds(t *testing.T) {
	const base, max = 200 * time.Millisecond, 10 * time.Second
	rnds := []float64{0, 0.25, 0.5, 0.999, 0.999999999999}
	for attempt := -1; attempt <= 70; attempt++ {
		prev := time.Duration(0)
		for _, r := range rnds {
			got := Backoff(attempt, base, max, func() float64 { return r })
			require.GreaterOrEqual(t, got, base/2, "attempt %d rnd %v", attempt, r)
			require.LessOrEqual(t, got, max, "attempt %d rnd %v", attempt, r)
			require.GreaterOrEqual(t, got, prev, "jitter must grow with rnd")
			prev = got
		}
	}
	// Default random source stays in bounds too.
	for i := 0; i < 1000; i++ {
		got := Backoff(i%20+1, base, max, nil)
		require.GreaterOrEqual(t, got, base/2)
		require.LessOrEqual(t, got, max)
	}
	// Out-of-range rnd values are clamped.
	require.Equal(t, base/2, Backoff(1, base, max, func() float64 { return -3 }))
	require.LessOrEqual(t, Backoff(1, base, max, func() float64 { return 7 }), base)
	// max <= 0: no cap, and no overflow.
	require.Equal(t, 512*time.Second, Backoff(11, time.Second, 0, func() float64 { return 0 }))
	require.Positive(t, Backoff(200, time.Second, 0, func() float64 { return 0.999 }))
	// max < base: max wins.
	require.LessOrEqual(t, Backoff(1, time.Minute, time.Second, func() float64 { return 0.999 }), time.Second)
	// base <= 0: no delay.
	require.Zero(t, Backoff(3, 0, max, nil))
}

// A node calls a handful of endpoints thousands of times a second: each is
// resolved once, and the cache of resolved endpoints stays bounded however
// many endpoints the jobs name, also when calls race.
func TestInvokeResolvesAnEndpointOnceAndBoundsItsCache(t *testing.T) {
	var paths sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths.Store(r.URL.RequestURI(), true)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	inv := &Invoker{Base: mustURL(t, srv.URL+"/app")}

	first, err := inv.target("/jobs/x?a=1")
	require.NoError(t, err)
	again, err := inv.target("/jobs/x?a=1")
	require.NoError(t, err)
	assert.Same(t, first, again, "a second call must reuse the resolved endpoint")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = inv.target("/jobs/x?a=1") }),
		"a cached endpoint must not be resolved again")

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range maxTargets / 2 {
				c := baseCall()
				c.Endpoint = "/jobs/" + strconv.Itoa(g) + "-" + strconv.Itoa(i)
				if res := inv.Invoke(context.Background(), c); res.Verdict != Succeeded {
					t.Errorf("%s: %+v", c.Endpoint, res)
					return
				}
			}
		}()
	}
	wg.Wait()
	n := 0
	inv.targets.Range(func(_, _ any) bool { n++; return true })
	assert.Equal(t, maxTargets, n, "the cache fills to its bound and no further")
	assert.EqualValues(t, maxTargets, inv.ntarget.Load())

	// Past the bound, endpoints still resolve, each to its own path.
	c := baseCall()
	c.Endpoint = "/jobs/after-the-bound"
	require.Equal(t, Succeeded, inv.Invoke(context.Background(), c).Verdict)
	_, called := paths.Load("/app/jobs/after-the-bound")
	assert.True(t, called, "an endpoint past the cache's bound is called at its own path")
	_, called = paths.Load("/app/jobs/7-3")
	assert.True(t, called)

	// An endpoint long enough to carry a job's data is never kept.
	fresh := &Invoker{Base: inv.Base}
	long := "/jobs/x?data=" + strings.Repeat("a", maxTargetLen)
	_, err = fresh.target(long)
	require.NoError(t, err)
	_, cached := fresh.targets.Load(long)
	assert.False(t, cached, "an endpoint of %d bytes must not be cached", len(long))
	assert.Zero(t, fresh.ntarget.Load())

	// Bad endpoints are refused every time and never cached.
	c.Endpoint = "/jobs/../admin"
	for range 2 {
		res := inv.Invoke(context.Background(), c)
		assert.Equal(t, Fail, res.Verdict)
		assert.Contains(t, res.Err, "dot segments are not allowed")
	}
	_, cached = inv.targets.Load("/jobs/../admin")
	assert.False(t, cached)
}

// Every call of an invoker goes through one client, built at the first
// call; it keeps the caller's CheckRedirect behind the host guard.
func TestInvokeBuildsItsGuardedClientOnce(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/jobs/moved" {
			http.Redirect(w, r, "/jobs/x", http.StatusFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	var checked atomic.Int32
	user := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { checked.Add(1); return nil }}
	inv := &Invoker{Base: mustURL(t, srv.URL), Client: user}
	c := baseCall()
	c.Endpoint = "/jobs/moved"
	for range 3 {
		require.Equal(t, Succeeded, inv.Invoke(context.Background(), c).Verdict)
	}
	assert.EqualValues(t, 3, checked.Load(), "every redirect goes through the caller's own check")
	assert.Same(t, inv.client(), inv.client())
	assert.NotSame(t, user, inv.client(), "the caller's client is copied, not changed")
}
