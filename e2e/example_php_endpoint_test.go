//go:build unix

package e2e

import (
	"bytes"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/callproto"
)

// The PHP example's endpoint (examples/php/endpoint.php) under PHP's
// built-in server, called by a real node with signed calls: the job
// producer.php enqueues ends done once and its order is invoiced once.
// Then calls sent straight to it: a forged, missing or stale signature is
// refused with 401, a replayed one with 409, an expired deadline with 503
// and no work, a payload without an order with 400, and a second call
// under the same Idempotency-Key answers 200 without working again.
func TestPHPExampleEndpoint(t *testing.T) {
	for _, d := range phpDrivers {
		t.Run(d.driver, func(t *testing.T) {
			requirePHPFor(t, d)
			t.Parallel()
			phpEndpoint(t, d.driver)
		})
	}
}

// lockedBuffer is the PHP server's log, written by its process.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startPHPEndpoint runs php -S on a free loopback port with endpoint.php as
// its router and returns its base URL once it answers.
func startPHPEndpoint(t *testing.T, driver string, appEnv []string) string {
	t.Helper()
	router, err := filepath.Abs(filepath.Join("..", "examples", "php", "endpoint.php"))
	require.NoError(t, err)
	return startExampleServer(t, driver, filepath.Dir(router), appEnv, func(addr string) []string {
		return []string{"php", "-S", addr, router}
	})
}

// phpCall is one request sent straight to the endpoint.
type phpCall struct {
	uri    string // request target: path and query
	header http.Header
	body   []byte
}

// send sends c as it is, signature headers included, and returns the
// status and body of the answer.
func (c phpCall) send(t *testing.T, base string) (int, string) {
	t.Helper()
	status, body, err := sendRaw(base, c)
	require.NoError(t, err)
	return status, body
}

// signedCall is a job call as a node makes it, signed with key at now.
func signedCall(t *testing.T, key []byte, now time.Time, uri, idem string, attempt int, deadline time.Time, body string) phpCall {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://endpoint"+uri, nil)
	require.NoError(t, err)
	req.Header.Set(callproto.HeaderIdempotencyKey, idem)
	req.Header.Set(callproto.HeaderJob, "9999")
	req.Header.Set(callproto.HeaderNode, "test")
	req.Header.Set(callproto.HeaderToken, "1")
	req.Header.Set(callproto.HeaderAttempt, strconv.Itoa(attempt))
	req.Header.Set(callproto.HeaderDeadline, deadline.UTC().Format(callproto.DeadlineFormat))
	req.Header.Set(callproto.HeaderTimeoutMs, strconv.FormatInt(time.Until(deadline).Milliseconds(), 10))
	callproto.SignRequest(req, []byte(body), key, now)
	return phpCall{uri: uri, header: req.Header, body: []byte(body)}
}

func phpEndpoint(t *testing.T, driver string) {
	endpointTest(t, driver, "php-endpoint-node", phpProducer(driver), true, func(t *testing.T, appEnv []string) string {
		return startPHPEndpoint(t, driver, appEnv)
	})
}
