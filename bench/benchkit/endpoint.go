package benchkit

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// HeaderNode names the node that calls the endpoint. slotpoller sends its
// own (X-Slotpoller-Node); the River worker sends this one.
const HeaderNode = "X-Bench-Node"

// Call is one call of the endpoint, timed on this process's clock.
type Call struct {
	Key           string
	Node          string
	Start, Finish time.Time
}

// Endpoint is the job both sides run: an HTTP handler at /job/<key> that
// takes Work (1 ms) and answers 204.
type Endpoint struct {
	srv  *httptest.Server
	work time.Duration

	mu       sync.Mutex
	calls    map[string]*Call
	finished int
	repeats  int
	changed  chan struct{} // closed and replaced on every finish
	conns    atomic.Int64
}

// NewEndpoint starts the endpoint.
func NewEndpoint(work time.Duration) *Endpoint {
	e := &Endpoint{work: work, calls: map[string]*Call{}, changed: make(chan struct{})}
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(e.serve))
	e.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			e.conns.Add(1)
		}
	}
	e.srv.Start()
	return e
}

// Connections is how many connections the endpoint has accepted so far: a
// side that opens one per call it runs at once opens Concurrency per node
// in a first burst; more means it closed some and dialled again.
func (e *Endpoint) Connections() int64 { return e.conns.Load() }

// URL is the base URL; a job's endpoint is URL()+"/job/"+key.
func (e *Endpoint) URL() string { return e.srv.URL }

// Close stops the server.
func (e *Endpoint) Close() { e.srv.Close() }

func (e *Endpoint) serve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	_, _ = io.Copy(io.Discard, r.Body)
	key, ok := strings.CutPrefix(r.URL.Path, "/job/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	node := r.Header.Get(HeaderNode)
	if node == "" {
		node = r.Header.Get("X-Slotpoller-Node")
	}
	time.Sleep(e.work)
	w.WriteHeader(http.StatusNoContent)
	finish := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, seen := e.calls[key]; seen {
		e.repeats++
		return
	}
	e.calls[key] = &Call{Key: key, Node: node, Start: start, Finish: finish}
	e.finished++
	close(e.changed)
	e.changed = make(chan struct{})
}

// Reset forgets all calls.
func (e *Endpoint) Reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls, e.finished, e.repeats = map[string]*Call{}, 0, 0
}

// Wait returns when n distinct keys have been called, or fails after
// timeout.
func (e *Endpoint) Wait(ctx context.Context, n int, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		e.mu.Lock()
		done, ch := e.finished, e.changed
		e.mu.Unlock()
		if done >= n {
			return nil
		}
		select {
		case <-ch:
		case <-deadline.C:
			return fmt.Errorf("only %d of %d jobs called after %v", done, n, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Calls returns the first call of every key, and how many calls repeated a
// key already called.
func (e *Endpoint) Calls() ([]Call, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Call, 0, len(e.calls))
	for _, c := range e.calls {
		out = append(out, *c)
	}
	return out, e.repeats
}
