package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slotpoller/slotpoller/callproto"
	"github.com/slotpoller/slotpoller/internal/jobspec"
)

// The headers of a call and its signature are the call protocol's
// (callproto): an endpoint checks them with that package alone.
const (
	// UserAgent is the User-Agent of every call.
	UserAgent = "slotpoller"

	// callHeaders is how many of callproto's headers every call carries
	// (User-Agent aside): job or task, node, token, attempt, idempotency
	// key, deadline, timeout and trace context.
	callHeaders = 8

	// maxResponseBody is how much of a response body the invoker reads.
	maxResponseBody = 64 << 10
	// maxErrBody is how much of the body goes into Result.Err.
	maxErrBody = 200
)

// ResolveEndpoint joins an endpoint path to the node's base URL; see
// jobspec.ResolveEndpoint, where the rules live so that a client checks an
// endpoint without this package.
func ResolveEndpoint(base *url.URL, endpoint string) (*url.URL, error) {
	return jobspec.ResolveEndpoint(base, endpoint)
}

// ValidateEndpoint reports whether ResolveEndpoint would accept endpoint
// (jobspec.ValidateEndpoint).
func ValidateEndpoint(endpoint string) error { return jobspec.ValidateEndpoint(endpoint) }

// Call is one attempt to run a job, or one call of an endless task.
type Call struct {
	JobID int64
	// Task, when set, makes this a call of the endless task of that name:
	// it carries X-Slotpoller-Task instead of X-Slotpoller-Job.
	Task  string
	Node  string // node name
	Token int64  // fencing token of the claim
	// Attempt is the attempt number, 1 for the first.
	Attempt int
	// IdempotencyKey is the same for every attempt of one logical run. Empty
	// means "slotpoller-job-<JobID>".
	IdempotencyKey string
	// Method is GET, POST, PUT, PATCH or DELETE (any case); empty means POST.
	Method   string
	Endpoint string // a path on the invoker's base URL, see ResolveEndpoint
	// Payload is the request body, sent whenever non-empty (whatever the
	// method).
	Payload []byte
	// Timeout is the call's deadline; it must be > 0.
	Timeout time.Duration
	// Budget, when set, is read once the call's start time is taken and
	// shortens Timeout to what it returns: the time left before the
	// claim's hold ends, less a margin. Read after the start, a freeze
	// between the two can only make the deadline earlier. A budget spent
	// before the call is sent fails the call with Retry, unsent.
	Budget func() time.Duration
	// Traceparent is the call's W3C trace context (tracing.StartCall);
	// "" sends none.
	Traceparent string
	// Headers are extra request headers (e.g. X-Slotpoller-Task,
	// X-Slotpoller-Scheduled-For); may be nil. They may replace Content-Type
	// and User-Agent but never the reserved X-Slotpoller-Job, -Node, -Token,
	// -Attempt, -Deadline, -Timeout-Ms or Idempotency-Key. Nor do they
	// reach X-Slotpoller-Timestamp and -Signature: those are set when the
	// invoker signs and removed when it does not.
	Headers map[string]string
}

// Invoker calls job endpoints on the node's own base URL.
type Invoker struct {
	// Base is the node's base URL, e.g. http://localhost or
	// http://localhost:8080/app.
	Base *url.URL
	// Client sends the requests. Nil means a client with no overall timeout
	// (each call's deadline rules) and no proxy. Whatever the client, a
	// redirect to a host other than Base's is refused (Verdict Fail).
	Client *http.Client
	// Now is the local clock for the deadline and timestamp headers and
	// Duration; nil means time.Now. Endpoints check the signature timestamp
	// against their own clock, so this should be the machine's wall clock.
	Now func() time.Time
	// SigningKey, when not empty, makes every call carry
	// X-Slotpoller-Timestamp and X-Slotpoller-Signature (see callproto.Sign
	// and callproto.Verifier); nil means calls are not signed. A secret: never
	// log it. It must not be modified while calls are made.
	SigningKey []byte

	// Filled on the first calls, so Base and Client must be set before,
	// and an Invoker must not be copied once it has made a call: a busy
	// node makes thousands of calls a second, mostly to a handful of
	// endpoints, and each call resolved its endpoint afresh (checks, a
	// parse, a join, a format and a parse again) and copied the client.
	guarded atomic.Pointer[http.Client]
	targets sync.Map // endpoint string → *url.URL, at most maxTargets
	ntarget atomic.Int32
}

// maxTargets bounds the resolved endpoints an invoker keeps: endpoints are
// a job's data, so a farm whose jobs all name their own would otherwise
// grow the cache without end. Past the bound, calls resolve afresh.
// Endpoints longer than maxTargetLen (a query that carries a job's data)
// are never kept.
const (
	maxTargets   = 1024
	maxTargetLen = 256
)

// target resolves endpoint on the invoker's base, once per endpoint while
// the cache has room. The URL returned is shared: callers copy it.
func (inv *Invoker) target(endpoint string) (*url.URL, error) {
	if u, ok := inv.targets.Load(endpoint); ok {
		return u.(*url.URL), nil
	}
	u, err := ResolveEndpoint(inv.Base, endpoint)
	if err != nil {
		return nil, err
	}
	if len(endpoint) > maxTargetLen || inv.ntarget.Load() >= maxTargets {
		return u, nil
	}
	// A place is reserved before the URL is stored, so racing callers
	// cannot pass the bound.
	if n := inv.ntarget.Add(1); n <= maxTargets {
		if _, loaded := inv.targets.LoadOrStore(endpoint, u); loaded {
			inv.ntarget.Add(-1)
		}
	} else {
		inv.ntarget.Add(-1)
	}
	return u, nil
}

// defaultClient is the client used when Invoker.Client is nil, sized for
// the default node capacity.
var defaultClient = NewClient(16)

// NewClient returns a client for an invoker that makes up to calls calls
// at once (the node's capacity). It never goes through a proxy: the
// endpoints live on the node itself. It keeps a connection per call idle
// between calls (net/http keeps 2 per host by default), so that a busy
// node does not close and dial again most of its connections at every
// burst; idle connections still close after the transport's idle timeout.
func NewClient(calls int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.MaxIdleConnsPerHost = max(calls, http.DefaultMaxIdleConnsPerHost)
	tr.MaxIdleConns = max(tr.MaxIdleConns, tr.MaxIdleConnsPerHost)
	return &http.Client{Transport: tr}
}

// errCallTimeout is the cause of a call context that hit the call's deadline.
var errCallTimeout = errors.New("call deadline exceeded")

// offHostRedirectError is returned by CheckRedirect for a redirect that
// leaves the base URL's host.
type offHostRedirectError struct{ to string }

func (e *offHostRedirectError) Error() string {
	return "endpoint redirected to another host (" + e.to + "); refused"
}

func (inv *Invoker) now() time.Time {
	if inv.Now != nil {
		return inv.Now()
	}
	return time.Now()
}

// client returns the client of every call: Client (or the default) with a
// guard that refuses redirects off the base URL's host and signs a
// redirected request afresh.
func (inv *Invoker) client() *http.Client {
	if c := inv.guarded.Load(); c != nil {
		return c
	}
	src := inv.Client
	if src == nil {
		src = defaultClient
	}
	c := *src // shallow copy: shares the transport, adds the host guard
	userCheck := src.CheckRedirect
	baseHost := inv.Base.Host
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if !strings.EqualFold(req.URL.Host, baseHost) {
			return &offHostRedirectError{to: req.URL.Redacted()}
		}
		if userCheck != nil {
			if err := userCheck(req, via); err != nil {
				return err
			}
		} else if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return inv.resign(req)
	}
	// Racing first calls may each build one; all are alike, one is kept.
	inv.guarded.CompareAndSwap(nil, &c)
	return inv.guarded.Load()
}

// resign signs a redirected request afresh, for its own method, target and
// body (a 301/302/303 turns a POST into a body-less GET; a 307/308 resends
// the body, which it reads again by GetBody), or drops the copied signature
// headers when not signing.
func (inv *Invoker) resign(req *http.Request) error {
	if len(inv.SigningKey) == 0 {
		req.Header.Del(callproto.HeaderTimestamp)
		req.Header.Del(callproto.HeaderSignature)
		return nil
	}
	var body []byte
	if req.Body != nil && req.Body != http.NoBody && req.GetBody != nil {
		rc, err := req.GetBody()
		if err != nil {
			return fmt.Errorf("re-reading the payload to sign the redirect: %w", err)
		}
		body, err = io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("re-reading the payload to sign the redirect: %w", err)
		}
	}
	callproto.SignRequest(req, body, inv.SigningKey, inv.now())
	return nil
}

// Invoke makes one call to c.Endpoint on the base URL and classifies the
// outcome: 2xx succeed; 408, 429, 5xx, timeouts and transport errors retry;
// other statuses fail. If ctx is cancelled by the caller (e.g. the node lost
// its lease), the call is abandoned and the result is Retry with Err
// "cancelled: <context.Cause(ctx)>". At most 64 KiB of a response body is
// read; the body is always closed.
func (inv *Invoker) Invoke(ctx context.Context, c Call) Result {
	start := inv.now()
	res := inv.invoke(ctx, c, start)
	res.Duration = inv.now().Sub(start)
	if res.Duration < 0 {
		res.Duration = 0
	}
	return res
}

func (inv *Invoker) invoke(ctx context.Context, c Call, start time.Time) Result {
	if inv.Base == nil {
		return Result{Verdict: Retry, Err: "invoker has no base URL"}
	}
	if c.Timeout <= 0 {
		return Result{Verdict: Fail, Err: fmt.Sprintf("call timeout must be > 0, got %v", c.Timeout)}
	}
	if c.Budget != nil {
		left := c.Budget()
		if left <= 0 {
			return Result{Verdict: Retry, Err: "not called: the claim's hold ran out before the call could be sent"}
		}
		c.Timeout = min(c.Timeout, left)
	}
	method, err := callMethod(c.Method)
	if err != nil {
		return Result{Verdict: Fail, Err: err.Error()}
	}
	target, err := inv.target(c.Endpoint)
	if err != nil {
		return Result{Verdict: Fail, Err: err.Error()}
	}
	for name, value := range c.Headers {
		if err := checkHeader(name, value); err != nil {
			return Result{Verdict: Fail, Err: err.Error()}
		}
	}
	// The protocol's own values that come from the row: one that no
	// request can carry fails the call at once, never a retry.
	for _, h := range [...]struct{ name, value string }{
		{callproto.HeaderIdempotencyKey, c.IdempotencyKey}, {callproto.HeaderTask, c.Task}, {callproto.HeaderNode, c.Node},
	} {
		if i := indexHeaderControl(h.value); i >= 0 {
			return Result{Verdict: Fail, Err: fmt.Sprintf("%s %q has a control character at byte %d; a request header cannot carry it", h.name, h.value, i)}
		}
	}

	callCtx, cancel := context.WithTimeoutCause(ctx, c.Timeout, errCallTimeout)
	defer cancel()

	var body io.Reader
	if len(c.Payload) > 0 {
		body = bytes.NewReader(c.Payload)
	}
	// The request gets its own copy of the resolved URL: formatting it
	// for NewRequest to parse again would cost a node a URL parse a call.
	req, err := http.NewRequestWithContext(callCtx, method, "", body)
	if err != nil {
		return Result{Verdict: Fail, Err: fmt.Sprintf("building request to %s: %v", target.Redacted(), err)}
	}
	u := *target
	req.URL, req.Host = &u, strings.TrimSuffix(u.Host, ":")
	// The protocol's headers share one backing array and a map sized for
	// them: a busy node makes thousands of calls a second, and a Set per
	// header is an allocation per header.
	req.Header = make(http.Header, len(c.Headers)+callHeaders+2)
	values := make([]string, 0, callHeaders+1)
	set := func(name, value string) { // name is canonical
		values = append(values, value)
		n := len(values)
		req.Header[name] = values[n-1 : n : n]
	}
	set("User-Agent", UserAgent)
	switch {
	case len(c.Payload) == 0:
	case json.Valid(c.Payload):
		req.Header.Set("Content-Type", "application/json")
	default:
		req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	}
	for name, value := range c.Headers {
		req.Header.Set(name, value)
	}
	key := c.IdempotencyKey
	if key == "" {
		key = "slotpoller-job-" + strconv.FormatInt(c.JobID, 10)
	}
	if c.Task != "" {
		set(callproto.HeaderTask, c.Task)
	} else {
		set(callproto.HeaderJob, strconv.FormatInt(c.JobID, 10))
	}
	set(callproto.HeaderNode, c.Node)
	set(callproto.HeaderToken, strconv.FormatInt(c.Token, 10))
	set(callproto.HeaderAttempt, strconv.Itoa(c.Attempt))
	set(callproto.HeaderIdempotencyKey, key)
	set(callproto.HeaderDeadline, start.Add(c.Timeout).UTC().Format(callproto.DeadlineFormat))
	set(callproto.HeaderTimeoutMs, strconv.FormatInt(c.Timeout.Milliseconds(), 10))
	if c.Traceparent != "" {
		set(callproto.HeaderTraceparent, c.Traceparent)
	}
	if len(inv.SigningKey) > 0 {
		// Signed last, over exactly what is sent: the method and request
		// line target of req, the headers set above, and the payload as
		// its body.
		callproto.SignRequest(req, c.Payload, inv.SigningKey, start)
	} else {
		req.Header.Del(callproto.HeaderTimestamp)
		req.Header.Del(callproto.HeaderSignature)
	}

	resp, err := inv.client().Do(req)
	if err != nil {
		return classifyError(ctx, callCtx, c.Timeout, target, resp, err)
	}
	// Read (up to the limit) so the connection can be reused, then close.
	var data []byte
	if resp.Body != http.NoBody { // a 204, or a 200 that says Content-Length: 0
		data, _ = io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	}
	resp.Body.Close()
	return classifyStatus(resp.StatusCode, data)
}

// callMethod normalizes and checks a call's method.
func callMethod(m string) (string, error) {
	m = strings.ToUpper(strings.TrimSpace(m))
	switch m {
	case "":
		return http.MethodPost, nil
	case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return m, nil
	}
	return "", fmt.Errorf("method %q is not allowed; use GET, POST, PUT, PATCH or DELETE", m)
}

// checkHeader refuses header names and values that net/http would reject at
// send time (which would otherwise be retried forever).
func checkHeader(name, value string) error {
	if name == "" {
		return errors.New("extra header with an empty name")
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("extra header name %q is not a valid HTTP token", name)
		}
	}
	if indexHeaderControl(value) >= 0 {
		return fmt.Errorf("extra header %s has a control character in its value", name)
	}
	return nil
}

// indexHeaderControl is the index of the first byte of a header value
// that net/http refuses to send (a control character other than tab), or
// -1.
func indexHeaderControl(value string) int {
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return i
		}
	}
	return -1
}

func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
