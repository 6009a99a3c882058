package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// Verdict is the outcome class of a call.
type Verdict int

const (
	// Succeeded: the endpoint answered 2xx.
	Succeeded Verdict = iota
	// Retry: 408, 429, 5xx, timeout, transport error or cancellation; run
	// again after Backoff, up to the job's limit.
	Retry
	// Fail: the job cannot succeed as it is (other 4xx, 1xx/3xx final
	// responses, bad endpoint, method or headers); do not retry.
	Fail
)

// String returns "succeeded", "retry" or "fail".
func (v Verdict) String() string {
	switch v {
	case Succeeded:
		return "succeeded"
	case Retry:
		return "retry"
	case Fail:
		return "fail"
	}
	return "Verdict(" + strconv.Itoa(int(v)) + ")"
}

// Result is the outcome of one call.
type Result struct {
	Verdict Verdict
	// Status is the HTTP status, 0 if there was no response.
	Status int
	// Err says, for an operator, why the call did not succeed; empty on
	// success. E.g. "endpoint answered 503 Service Unavailable: <first 200
	// bytes of body>", "timed out after 30s", "connection refused to
	// http://localhost:8080/x", "cancelled: lease lost".
	Err string
	// Duration is how long the call took, by Invoker.Now.
	Duration time.Duration
}

// classifyStatus turns a final response into a Result.
func classifyStatus(code int, body []byte) Result {
	res := Result{Status: code}
	switch {
	case code >= 200 && code < 300:
		res.Verdict = Succeeded
		return res
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500 && code < 600:
		res.Verdict = Retry
	default:
		res.Verdict = Fail
	}
	msg := "endpoint answered " + strconv.Itoa(code)
	if text := http.StatusText(code); text != "" {
		msg += " " + text
	}
	if snippet := bodySnippet(body); snippet != "" {
		msg += ": " + snippet
	}
	res.Err = msg
	return res
}

// bodySnippet returns the first maxErrBody bytes of body as readable text.
func bodySnippet(body []byte) string {
	if len(body) > maxErrBody {
		body = body[:maxErrBody]
		// Do not cut a UTF-8 sequence in half.
		for len(body) > 0 && !utf8.Valid(body) && len(body) > maxErrBody-utf8.UTFMax {
			body = body[:len(body)-1]
		}
	}
	s := strings.ToValidUTF8(string(body), "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// classifyError turns an error from Client.Do into a Result.
func classifyError(ctx, callCtx context.Context, timeout time.Duration, target *url.URL, resp *http.Response, err error) Result {
	where := target.Redacted()
	var off *offHostRedirectError
	if errors.As(err, &off) {
		res := Result{Verdict: Fail, Err: off.Error()}
		if resp != nil {
			res.Status = resp.StatusCode
		}
		return res
	}
	if errors.Is(context.Cause(callCtx), errCallTimeout) {
		return Result{Verdict: Retry, Err: "timed out after " + timeout.String()}
	}
	if ctx.Err() != nil {
		return Result{Verdict: Retry, Err: "cancelled: " + context.Cause(ctx).Error()}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	switch {
	case isErrno(err, syscall.ECONNREFUSED, 10061 /* WSAECONNREFUSED */):
		return Result{Verdict: Retry, Err: "connection refused to " + where}
	case isErrno(err, syscall.ECONNRESET, 10054 /* WSAECONNRESET */):
		return Result{Verdict: Retry, Err: "connection reset by " + where}
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return Result{Verdict: Retry, Err: "connection closed without a response by " + where}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		// A transport-level timeout (dial, TLS handshake, response headers)
		// of a client-supplied transport.
		return Result{Verdict: Retry, Err: fmt.Sprintf("timed out calling %s: %v", where, err)}
	}
	return Result{Verdict: Retry, Err: fmt.Sprintf("calling %s failed: %v", where, err)}
}

// isErrno reports whether err is the errno e, or the Windows Sockets error
// number win (which does not match syscall's invented constants on Windows).
func isErrno(err error, e syscall.Errno, win uintptr) bool {
	if errors.Is(err, e) {
		return true
	}
	var errno syscall.Errno
	return errors.As(err, &errno) && uintptr(errno) == win
}
