package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// buildSlotpoller builds the product's binary into dir, so that the soak
// runs the nodes as the service runs them: one process each, which can
// be killed.
func buildSlotpoller(ctx context.Context, dir string, stderr io.Writer) (string, error) {
	bin := filepath.Join(dir, "slotpoller")
	// By import path, so that it builds from any folder of the module.
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/slotpoller/slotpoller")
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build slotpoller: %w", err)
	}
	return bin, nil
}

// soakNode is one node of the soak's farm: a `slotpoller run` process
// under a fixed name, started again under the same name after each kill
// (or after it exits by itself, which the report shows).
type soakNode struct {
	name    string
	bin     string
	env     []string
	dir     string // the working folder: no config file there, defaults and environment apply
	logPath string // every incarnation appends its output

	mu    sync.Mutex
	lives []*incarnation
	// deaths are its incarnations that ended before the soak stopped
	// them, in order.
	deaths []death
	// onDeath hears of an incarnation that exited by itself; the soak
	// starts it again.
	onDeath func(n *soakNode)
}

// incarnation is one process of a node.
type incarnation struct {
	cmd     *exec.Cmd
	log     *os.File
	started time.Time
	done    chan struct{} // closed when the process has been reaped

	// Written before done closes (ended, how, cpu) or under the node's
	// mutex (expected, rss).
	ended    time.Time
	how      string        // "killed", "stopped", or how it exited by itself
	cpu      time.Duration // user and system time at its end (wait4's rusage)
	expected bool          // the soak ended it
	rss      []rssSample
	// cpuAtLoad is its CPU time when the load began, for an incarnation
	// already running then: only what it spent after counts. cpuAtDrain
	// is its CPU time when the queue had drained, for one running then
	// (drainRead): its graceful stop is not the soak's.
	cpuAtLoad, cpuAtDrain time.Duration
	drainRead             bool
}

// cpuUntilDrain is its CPU time up to the drain's end: all of it when it
// ended before.
func (inc *incarnation) cpuUntilDrain() time.Duration {
	if inc.drainRead {
		return inc.cpuAtDrain
	}
	return inc.cpu
}

// nodeEnv is the environment of node name: the machine's, without any
// SLOTPOLLER_ variable of the caller's (they would change what is
// measured), and the soak's configuration.
func nodeEnv(name, driver, dsn, baseURL string, capacity int, logLevel string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(strings.ToUpper(kv), "SLOTPOLLER_") {
			env = append(env, kv)
		}
	}
	return append(env,
		"SLOTPOLLER_DATABASE_DRIVER="+driver,
		"SLOTPOLLER_DATABASE_DSN="+dsn,
		"SLOTPOLLER_NODE_NAME="+name,
		fmt.Sprintf("SLOTPOLLER_NODE_CAPACITY=%d", capacity),
		"SLOTPOLLER_JOBS_BASE_URL="+baseURL,
		"SLOTPOLLER_LOG_LEVEL="+logLevel,
	)
}

// start starts a new incarnation.
func (n *soakNode) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("node %s: log file: %w", n.name, err)
	}
	fmt.Fprintf(f, "--- bench soak: incarnation %d of %s starts at %s\n", len(n.lives)+1, n.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(n.bin, "run")
	cmd.Env, cmd.Dir = n.env, n.dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = dieWithTheBench()
	inc := &incarnation{cmd: cmd, log: f, started: time.Now(), done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start node %s: %w", n.name, err)
	}
	if len(n.lives) > 0 {
		// The previous incarnation's calls end where this one's may
		// begin.
		if len(n.deaths) > 0 && n.deaths[len(n.deaths)-1].until.IsZero() {
			n.deaths[len(n.deaths)-1].until = inc.started
		}
	}
	n.lives = append(n.lives, inc)
	go n.reap(inc)
	return nil
}

// reap waits for the incarnation's end and records it.
func (n *soakNode) reap(inc *incarnation) {
	err := inc.cmd.Wait()
	ended := time.Now()
	if st := inc.cmd.ProcessState; st != nil {
		inc.cpu = st.UserTime() + st.SystemTime()
	}
	inc.log.Close()
	n.mu.Lock()
	inc.ended = ended
	expected := inc.expected
	if !expected {
		inc.how = "exited by itself: " + exitText(err)
		n.deaths = append(n.deaths, death{node: n.name, pid: inc.cmd.Process.Pid, how: inc.how, from: inc.started, at: ended, inFlight: -1, held: -1})
	}
	n.mu.Unlock()
	close(inc.done)
	if !expected && n.onDeath != nil {
		n.onDeath(n)
	}
}

func exitText(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// current is the running incarnation, nil when there is none.
func (n *soakNode) current() *incarnation {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.lives) == 0 {
		return nil
	}
	inc := n.lives[len(n.lives)-1]
	if !inc.ended.IsZero() || inc.expected {
		return nil
	}
	return inc
}

// kill ends the running incarnation with SIGKILL, as a crash would, and
// waits until it has been reaped; inFlight is how many calls it had
// running at the endpoint just before.
func (n *soakNode) kill(ctx context.Context, inFlight int) error {
	inc := n.current()
	if inc == nil {
		return fmt.Errorf("node %s has no running process to kill", n.name)
	}
	n.mu.Lock()
	inc.expected, inc.how = true, "killed"
	n.mu.Unlock()
	if err := inc.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill node %s: %w", n.name, err)
	}
	select {
	case <-inc.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	n.mu.Lock()
	n.deaths = append(n.deaths, death{node: n.name, pid: inc.cmd.Process.Pid, how: "killed", from: inc.started, at: inc.ended, inFlight: inFlight, held: -1})
	n.mu.Unlock()
	return nil
}

// noteHeld records on the last death how many jobs the database still had
// running under the node's name after it.
func (n *soakNode) noteHeld(held int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.deaths) > 0 {
		n.deaths[len(n.deaths)-1].held = held
	}
}

// stop ends the running incarnation gracefully (SIGTERM), as the
// service manager does, killing it if it has not stopped within limit.
func (n *soakNode) stop(limit time.Duration) error {
	inc := n.current()
	if inc == nil {
		return nil
	}
	n.mu.Lock()
	inc.expected, inc.how = true, "stopped"
	n.mu.Unlock()
	if err := inc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		// No SIGTERM on Windows: end it at once.
		_ = inc.cmd.Process.Kill()
	}
	select {
	case <-inc.done:
		if st := inc.cmd.ProcessState; st != nil && !st.Success() {
			return fmt.Errorf("node %s stopped with %s", n.name, st)
		}
		return nil
	case <-time.After(limit):
		_ = inc.cmd.Process.Kill()
		<-inc.done
		return fmt.Errorf("node %s did not stop within %v of SIGTERM: killed", n.name, limit)
	}
}

// sampleRSS adds a sample of the running incarnation's resident set.
func (n *soakNode) sampleRSS(now time.Time) error {
	inc := n.current()
	if inc == nil {
		return nil // between a kill and the restart
	}
	b, err := readRSS(inc.cmd.Process.Pid)
	if err != nil {
		return err
	}
	n.mu.Lock()
	inc.rss = append(inc.rss, rssSample{age: now.Sub(inc.started), bytes: b})
	n.mu.Unlock()
	return nil
}

// lastRSS is the running incarnation's latest sample, 0 when there is
// none.
func (n *soakNode) lastRSS() int64 {
	inc := n.current()
	n.mu.Lock()
	defer n.mu.Unlock()
	if inc == nil || len(inc.rss) == 0 {
		return 0
	}
	return inc.rss[len(inc.rss)-1].bytes
}

// incarnations and deathList are copies for the report.
func (n *soakNode) incarnations() []*incarnation {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*incarnation(nil), n.lives...)
}

func (n *soakNode) deathList() []death {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]death(nil), n.deaths...)
}
