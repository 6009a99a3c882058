package install

// Starting and stopping a Windows service, and waiting for it, bounded:
// the logic, apart from the Windows calls (scm_windows.go) so that it is
// tested everywhere with a fake service manager.

import (
	"errors"
	"fmt"
	"time"
)

// scmState is a Windows service's state, as the service manager reports
// it (SERVICE_STOPPED = 1 ... SERVICE_PAUSED = 7).
type scmState uint32

const (
	scmStopped      scmState = 1
	scmStartPending scmState = 2
	scmStopPending  scmState = 3
	scmRunning      scmState = 4
)

// The states of ServiceState.State that only Windows reports: the service
// manager says so while the node starts and while it drains.
const (
	StateStarting = "starting"
	StateStopping = "stopping"
)

func (s scmState) String() string {
	switch s {
	case scmStopped:
		return StateStopped
	case scmStartPending:
		return StateStarting
	case scmStopPending:
		return StateStopping
	case scmRunning:
		return StateRunning
	}
	return StateUnknown
}

// scmStatus is the service manager's answer about a service.
type scmStatus struct {
	State      scmState
	CheckPoint uint32
	// ExitCode and ServiceExitCode are why a stopped service stopped
	// (ERROR_SERVICE_SPECIFIC_ERROR and the service's own code, or a
	// Windows error).
	ExitCode, ServiceExitCode uint32
}

// The service manager's refusals that start and stop take for the state
// they wanted (the Windows errors mapped by scm_windows.go).
var (
	errSCMAlreadyRunning = errors.New("the service is running already")
	errSCMNotActive      = errors.New("the service is not running")
	errSCMCannotAccept   = errors.New("the service cannot accept the control now")
)

// scmService is one service of the Windows service manager.
type scmService interface {
	query() (scmStatus, error)
	// start asks the service manager to start the service; it returns
	// once the process has connected (or the manager gave up on it).
	start() error
	// stop sends the stop control.
	stop() error
}

// scmWaiter polls a service until it reaches a state, within a bound.
type scmWaiter struct {
	name  string
	now   func() time.Time
	sleep func(time.Duration)
	// every is how often the state is read.
	every time.Duration
}

// scmStartBound is how long `slotpoller start` waits for the service to
// report running: Windows gives a service 30 s to connect, and slotpoller's
// reports running as soon as its node is launched.
const scmStartBound = 45 * time.Second

// eventLogHint points at where a service that does not start says why.
func eventLogHint(name string) string {
	return "see the Event Log: Get-WinEvent -ProviderName " + name + " -MaxEvents 20 | Format-List TimeCreated, LevelDisplayName, Message"
}

// wait polls until the service leaves the states in pending, at most
// bound; it returns the last status read.
func (w scmWaiter) wait(s scmService, bound time.Duration, pending ...scmState) (scmStatus, error) {
	deadline := w.now().Add(bound)
	for {
		st, err := s.query()
		if err != nil {
			return st, err
		}
		still := false
		for _, p := range pending {
			still = still || st.State == p
		}
		if !still {
			return st, nil
		}
		if !w.now().Before(deadline) {
			return st, fmt.Errorf("the service %q is still %s after %v (checkpoint %d)", w.name, st.State, bound, st.CheckPoint)
		}
		w.sleep(w.every)
	}
}

// start starts the service and waits until it runs, at most
// scmStartBound; a service that runs already is left as it is ("already
// running"), and one that stops is waited for first (at most stopBound).
// A service that stops as it starts is an error that points at the Event
// Log.
func (w scmWaiter) start(s scmService, stopBound time.Duration) (string, error) {
	st, err := w.wait(s, stopBound, scmStopPending)
	if err != nil {
		return "", err
	}
	switch st.State {
	case scmRunning:
		return "already running", nil
	case scmStartPending:
	default:
		switch err := s.start(); {
		case errors.Is(err, errSCMAlreadyRunning):
		case err != nil:
			return "", fmt.Errorf("%w; %s", err, eventLogHint(w.name))
		}
	}
	st, err = w.wait(s, scmStartBound, scmStartPending)
	if err != nil {
		return "", fmt.Errorf("%w; %s", err, eventLogHint(w.name))
	}
	if st.State != scmRunning {
		return "", fmt.Errorf("the service %q is %s right after its start (exit code %d, service exit code %d); %s",
			w.name, st.State, st.ExitCode, st.ServiceExitCode, eventLogHint(w.name))
	}
	return "started", nil
}

// stop stops the service and waits until it has stopped, at most bound:
// the node drains meanwhile, reporting stop pending with a new checkpoint
// every few seconds. A stopped service is left as it is ("already
// stopped"); a service that stops already (a second stop during a drain)
// is waited for; one that starts is let start first.
func (w scmWaiter) stop(s scmService, bound time.Duration) (string, error) {
	st, err := w.wait(s, scmStartBound, scmStartPending)
	if err != nil {
		return "", err
	}
	switch st.State {
	case scmStopped:
		return "already stopped", nil
	case scmStopPending:
	default:
		switch err := s.stop(); {
		case errors.Is(err, errSCMNotActive):
			return "already stopped", nil
		case errors.Is(err, errSCMCannotAccept):
			// It began to stop between the query and the control.
		case err != nil:
			return "", err
		}
	}
	st, err = w.wait(s, bound, scmStopPending, scmRunning)
	if err != nil {
		return "", fmt.Errorf("%w: the node gives up at its own stop bound, leaving its work to the leases; %s", err, eventLogHint(w.name))
	}
	return "stopped", nil
}

// restart stops the service if it runs, then starts it: a stopped service
// is started, as systemctl restart does.
func (w scmWaiter) restart(s scmService, stopBound time.Duration) (string, error) {
	if _, err := w.stop(s, stopBound); err != nil {
		return "", err
	}
	if _, err := w.start(s, stopBound); err != nil {
		return "", err
	}
	return "restarted", nil
}
