package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// soakEndpoint is the soak's job: an HTTP handler at /job/<key> in the
// bench's own process that takes work and answers 204, and records every
// call by key, so that a call starting while another call of its key is
// still running is seen as it happens.
type soakEndpoint struct {
	srv  *httptest.Server
	work time.Duration

	mu  sync.Mutex
	log *callLog
}

func newSoakEndpoint(work time.Duration) *soakEndpoint {
	e := &soakEndpoint{work: work, log: newCallLog(time.Now())}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	return e
}

// URL is the nodes' jobs.base_url.
func (e *soakEndpoint) URL() string { return e.srv.URL }

// Close stops the server.
func (e *soakEndpoint) Close() { e.srv.Close() }

func (e *soakEndpoint) serve(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	key, ok := strings.CutPrefix(r.URL.Path, "/job/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	node := r.Header.Get("X-Slotpoller-Node")
	e.mu.Lock()
	e.log.start(key, node, start)
	e.mu.Unlock()
	// The call is in flight until the answer is written: a second call
	// of the key that starts before then overlaps this one.
	defer func() {
		e.mu.Lock()
		e.log.finish(key, node)
		e.mu.Unlock()
	}()
	_, _ = io.Copy(io.Discard, r.Body)
	time.Sleep(e.work)
	w.WriteHeader(http.StatusNoContent)
}

// inFlight is how many calls node has running now.
func (e *soakEndpoint) inFlight(node string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.log.byNode[node]
}

// distinct is how many keys have been called.
func (e *soakEndpoint) distinct() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.log.keys)
}

// record is the log itself, not a copy (a soak's is large): read it once
// the farm has stopped calling.
func (e *soakEndpoint) record() *callLog {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.log
}

// callLog is the record of every call by key. Times are kept as offsets
// from base to keep a soak's million keys small.
type callLog struct {
	base    time.Time
	keys    map[string]keyCalls
	byNode  map[string]int // calls in flight by node
	nodes   map[string]string
	calls   int
	repeats []repeatCall
}

// keyCalls is what the log keeps of one key.
type keyCalls struct {
	first, lastStart time.Duration // since the log's base
	lastNode         string
	calls, inFlight  int32
}

// repeatCall is a call of a key that had been called before.
type repeatCall struct {
	key       string
	prevNode  string
	prevStart time.Time
	node      string
	start     time.Time
	atOnce    bool // it started while another call of the key was in flight
}

func newCallLog(base time.Time) *callLog {
	return &callLog{base: base, keys: map[string]keyCalls{}, byNode: map[string]int{}, nodes: map[string]string{}}
}

// start records a call of key by node beginning at t.
func (l *callLog) start(key, node string, t time.Time) {
	if n, ok := l.nodes[node]; ok {
		node = n // one copy of each name, not one per call
	} else {
		l.nodes[node] = node
	}
	l.calls++
	l.byNode[node]++
	at := t.Sub(l.base)
	k, seen := l.keys[key]
	if seen {
		l.repeats = append(l.repeats, repeatCall{
			key: key, prevNode: k.lastNode, prevStart: l.base.Add(k.lastStart), node: node, start: t,
			atOnce: k.inFlight > 0,
		})
	} else {
		k.first = at
	}
	k.lastStart, k.lastNode = at, node
	k.calls++
	k.inFlight++
	l.keys[key] = k
}

// finish records the end of a call of key by node.
func (l *callLog) finish(key, node string) {
	k := l.keys[key]
	k.inFlight--
	l.keys[key] = k
	l.byNode[node]--
}

// firstStart is when key was first called; ok is false if it never was.
func (l *callLog) firstStart(key string) (time.Time, bool) {
	k, ok := l.keys[key]
	if !ok {
		return time.Time{}, false
	}
	return l.base.Add(k.first), true
}

// death is the end of one incarnation of a node that did not stop of its
// own accord: killed by the soak, or exited by itself.
type death struct {
	node string
	pid  int
	how  string // "killed", or how it exited by itself
	// inFlight is how many calls it had running at the endpoint when
	// the soak killed it, held how many jobs the database had running
	// under its name after (-1: not counted, it exited by itself).
	inFlight, held int
	// from and until bound the calls the dead incarnation made: from its
	// start to the start of the next incarnation under the name (a new
	// process cannot call before it exists; the zero time: none started).
	from, until time.Time
	at          time.Time // when it died
}

// repeatKinds splits the repeated calls: those that started while
// another call of their key ran (never allowed), those that re-ran a job
// whose previous call was made by an incarnation that died before the
// repeat (at-least-once: the job waited for its claim to run out), and
// the rest (a job called twice with no death to explain it). perDeath
// counts the re-runs after each death, by index.
func repeatKinds(repeats []repeatCall, deaths []death) (atOnce, afterDeath, unexplained int, perDeath []int) {
	perDeath = make([]int, len(deaths))
	for _, r := range repeats {
		if r.atOnce {
			atOnce++
			continue
		}
		found := -1
		for i, d := range deaths {
			if d.node == r.prevNode && !r.prevStart.Before(d.from) && (d.until.IsZero() || r.prevStart.Before(d.until)) &&
				!r.start.Before(d.at) {
				found = i
				break
			}
		}
		if found < 0 {
			unexplained++
			continue
		}
		afterDeath++
		perDeath[found]++
	}
	return atOnce, afterDeath, unexplained, perDeath
}
