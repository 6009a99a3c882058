package install

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeSCM is the Windows service manager's view of one service: each
// query returns the next of states (the last one repeats), and start and
// stop record that they were asked and set what follows.
type fakeSCM struct {
	states   []scmStatus
	startErr error
	stopErr  error
	onStart  []scmStatus // the states after a start
	onStop   []scmStatus // the states after a stop control
	did      []string
	queries  int
}

func (f *fakeSCM) query() (scmStatus, error) {
	f.queries++
	st := f.states[0]
	if len(f.states) > 1 {
		f.states = f.states[1:]
	}
	return st, nil
}

func (f *fakeSCM) start() error {
	f.did = append(f.did, "start")
	if f.startErr == nil && f.onStart != nil {
		f.states = f.onStart
	}
	return f.startErr
}

func (f *fakeSCM) stop() error {
	f.did = append(f.did, "stop")
	if f.stopErr == nil && f.onStop != nil {
		f.states = f.onStop
	}
	return f.stopErr
}

// fakeWaiter is a waiter on a fake clock: sleeping advances it.
func fakeWaiter() (*scmWaiter, *time.Duration) {
	var elapsed time.Duration
	t0 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	return &scmWaiter{name: "slotpoller", every: 250 * time.Millisecond,
		now:   func() time.Time { return t0.Add(elapsed) },
		sleep: func(d time.Duration) { elapsed += d }}, &elapsed
}

func st(s scmState, checkpoint uint32) scmStatus { return scmStatus{State: s, CheckPoint: checkpoint} }

// As systemctl does: a start of a running service, a stop of a stopped
// one change nothing and succeed.
func TestSCMStartAndStopAreNoOpsInTheStateAskedFor(t *testing.T) {
	w, _ := fakeWaiter()
	running := &fakeSCM{states: []scmStatus{st(scmRunning, 0)}}
	done, err := w.start(running, time.Minute)
	require.NoError(t, err)
	require.Equal(t, "already running", done)
	require.Empty(t, running.did)

	stopped := &fakeSCM{states: []scmStatus{st(scmStopped, 0)}}
	done, err = w.stop(stopped, time.Minute)
	require.NoError(t, err)
	require.Equal(t, "already stopped", done)
	require.Empty(t, stopped.did)

	// It stopped between the query and the control.
	raced := &fakeSCM{states: []scmStatus{st(scmRunning, 0)}, stopErr: errSCMNotActive}
	done, err = w.stop(raced, time.Minute)
	require.NoError(t, err)
	require.Equal(t, "already stopped", done)
}

// A stop during a drain sends nothing and waits for the drain, whose
// checkpoints rise, to end.
func TestSCMSecondStopWaitsForTheDrain(t *testing.T) {
	w, elapsed := fakeWaiter()
	draining := &fakeSCM{states: []scmStatus{st(scmStopPending, 3), st(scmStopPending, 4), st(scmStopPending, 5), st(scmStopped, 0)}}
	done, err := w.stop(draining, time.Minute)
	require.NoError(t, err)
	require.Equal(t, "stopped", done)
	require.Empty(t, draining.did)
	require.Equal(t, 500*time.Millisecond, *elapsed)

	running := &fakeSCM{states: []scmStatus{st(scmRunning, 0)},
		onStop: []scmStatus{st(scmStopPending, 1), st(scmStopPending, 2), st(scmStopped, 0)}}
	done, err = w.stop(running, time.Minute)
	require.NoError(t, err)
	require.Equal(t, "stopped", done)
	require.Equal(t, []string{"stop"}, running.did)
}

// A stop has a bound on this side too: the service manager's own wait
// has none for a stop it was asked for.
func TestSCMStopIsBounded(t *testing.T) {
	w, elapsed := fakeWaiter()
	hung := &fakeSCM{states: []scmStatus{st(scmRunning, 0)}, onStop: []scmStatus{st(scmStopPending, 7)}}
	_, err := w.stop(hung, 30*time.Second)
	require.ErrorContains(t, err, `the service "slotpoller" is still stopping after 30s (checkpoint 7)`)
	require.ErrorContains(t, err, "Get-WinEvent -ProviderName slotpoller")
	require.Equal(t, 30*time.Second, *elapsed)
}

// A start that fails, whether the service manager says so or the service
// stops as it starts, points at the Event Log, where the node says why.
func TestSCMFailedStartPointsAtTheEventLog(t *testing.T) {
	w, _ := fakeWaiter()
	exited := &fakeSCM{states: []scmStatus{st(scmStopped, 0)},
		onStart: []scmStatus{st(scmStartPending, 0), {State: scmStopped, ExitCode: 1066, ServiceExitCode: 1}}}
	_, err := w.start(exited, time.Minute)
	require.ErrorContains(t, err, `the service "slotpoller" is stopped right after its start (exit code 1066, service exit code 1)`)
	require.ErrorContains(t, err, "Get-WinEvent -ProviderName slotpoller")

	refused := &fakeSCM{states: []scmStatus{st(scmStopped, 0)}, startErr: errors.New("Service request timeout.")}
	_, err = w.start(refused, time.Minute)
	require.ErrorContains(t, err, "Service request timeout.; see the Event Log: Get-WinEvent -ProviderName slotpoller")

	// A service that is still stopping is let stop first.
	stopping := &fakeSCM{states: []scmStatus{st(scmStopPending, 1), st(scmStopped, 0)}, onStart: []scmStatus{st(scmRunning, 0)}}
	done, err := w.start(stopping, time.Minute)
	require.NoError(t, err)
	require.Equal(t, "started", done)
	require.Equal(t, []string{"start"}, stopping.did)
}

// restart starts a stopped service, and stops a running one first.
func TestSCMRestart(t *testing.T) {
	w, _ := fakeWaiter()
	stopped := &fakeSCM{states: []scmStatus{st(scmStopped, 0)}, onStart: []scmStatus{st(scmRunning, 0)}}
	done, err := w.restart(stopped, time.Minute)
	require.NoError(t, err)
	require.Equal(t, "restarted", done)
	require.Equal(t, []string{"start"}, stopped.did)

	running := &fakeSCM{states: []scmStatus{st(scmRunning, 0)},
		onStop: []scmStatus{st(scmStopPending, 1), st(scmStopped, 0)}, onStart: []scmStatus{st(scmStartPending, 0), st(scmRunning, 0)}}
	done, err = w.restart(running, time.Minute)
	require.NoError(t, err)
	require.Equal(t, "restarted", done)
	require.Equal(t, []string{"stop", "start"}, running.did)
}

func TestSCMStateNames(t *testing.T) {
	require.Equal(t, "stopping", scmStopPending.String())
	require.Equal(t, "starting", scmStartPending.String())
	require.Equal(t, "installed, stopping (windows-service)",
		ServiceState{Installed: true, State: StateStopping, Platform: "windows-service"}.String())
}
