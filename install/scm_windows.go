//go:build windows

package install

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	kservice "github.com/kardianos/service"
	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/mgr"
)

// scmDefaultStopBound is how long `slotpoller stop` waits for a service
// whose pre-shutdown timeout cannot be read (one installed by hand).
const scmDefaultStopBound = 2 * time.Minute

// mgrService is a service opened with the rights to query, start and
// stop it, which the service manager grants more widely than the rights
// to change it.
type mgrService struct {
	m *mgr.Mgr
	s *mgr.Service
}

func openSCM(name string) (*mgrService, error) {
	h, err := windows.OpenSCManager(nil, nil, windows.SC_MANAGER_CONNECT)
	if err != nil {
		return nil, err
	}
	m := &mgr.Mgr{Handle: h}
	sh, err := windows.OpenService(h, windows.StringToUTF16Ptr(name),
		windows.SERVICE_QUERY_CONFIG|windows.SERVICE_QUERY_STATUS|windows.SERVICE_START|windows.SERVICE_STOP)
	if err != nil {
		m.Disconnect()
		return nil, err
	}
	return &mgrService{m: m, s: &mgr.Service{Handle: sh, Name: name}}, nil
}

func (w *mgrService) close() {
	w.s.Close()
	w.m.Disconnect()
}

func (w *mgrService) query() (scmStatus, error) {
	st, err := w.s.Query()
	if err != nil {
		return scmStatus{}, err
	}
	return scmStatus{State: scmState(st.State), CheckPoint: st.CheckPoint,
		ExitCode: st.Win32ExitCode, ServiceExitCode: st.ServiceSpecificExitCode}, nil
}

func (w *mgrService) start() error {
	err := w.s.Start()
	if errors.Is(err, windows.ERROR_SERVICE_ALREADY_RUNNING) {
		return fmt.Errorf("%w (%v)", errSCMAlreadyRunning, err)
	}
	return err
}

func (w *mgrService) stop() error {
	_, err := w.s.Control(svc.Stop)
	switch {
	case errors.Is(err, windows.ERROR_SERVICE_NOT_ACTIVE):
		return fmt.Errorf("%w (%v)", errSCMNotActive, err)
	case errors.Is(err, windows.ERROR_SERVICE_CANNOT_ACCEPT_CTRL):
		return fmt.Errorf("%w (%v)", errSCMCannotAccept, err)
	}
	return err
}

// stopBound is how long a stop may take: the pre-shutdown timeout that
// install set to the manager's stop timeout (the node's stop bound plus
// ManagerStopMargin), and ManagerStopMargin more for the process to end.
func (w *mgrService) stopBound() time.Duration {
	var info struct{ PreshutdownTimeout uint32 }
	var needed uint32
	err := windows.QueryServiceConfig2(w.s.Handle, windows.SERVICE_CONFIG_PRESHUTDOWN_INFO,
		(*byte)(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info)), &needed)
	if err != nil || info.PreshutdownTimeout == 0 {
		return scmDefaultStopBound
	}
	return time.Duration(info.PreshutdownTimeout)*time.Millisecond + ManagerStopMargin
}

func realWaiter(name string) scmWaiter {
	return scmWaiter{name: name, now: time.Now, sleep: time.Sleep, every: 250 * time.Millisecond}
}

// scmKService is a kardianos/service Windows service whose state and
// control go to the service manager directly.
type scmKService struct {
	kservice.Service
	name string
}

// withSCM makes s an scmController.
func withSCM(s kservice.Service, name string) kservice.Service {
	return &scmKService{Service: s, name: name}
}

// scmControl starts, stops or restarts the service and waits, bounded,
// for the state asked for; done says what happened ("started", "already
// running", ...).
func (k *scmKService) scmControl(action string) (done string, err error) {
	w, err := openSCM(k.name)
	if err != nil {
		return "", err
	}
	defer w.close()
	waiter := realWaiter(k.name)
	switch action {
	case "start":
		return waiter.start(w, w.stopBound())
	case "stop":
		return waiter.stop(w, w.stopBound())
	case "restart":
		return waiter.restart(w, w.stopBound())
	}
	return "", fmt.Errorf("service: unknown action %q", action)
}

// scmState reads the service's state, with the states between (starting,
// stopping) that kardianos/service folds into running and stopped.
func (k *scmKService) scmState() ServiceState {
	st := ServiceState{Name: k.name, Platform: k.Platform()}
	w, err := openSCM(k.name)
	switch {
	case errors.Is(err, windows.ERROR_SERVICE_DOES_NOT_EXIST):
		st.State = StateNotInstalled
		return st
	case err != nil:
		st.State, st.Error = StateUnknown, err.Error()
		return st
	}
	defer w.close()
	q, err := w.query()
	if err != nil {
		st.Installed, st.State, st.Error = true, StateUnknown, err.Error()
		return st
	}
	st.Installed, st.State, st.Running = true, q.State.String(), q.State == scmRunning
	if st.State == StateUnknown {
		st.Error = fmt.Sprintf("service state %d", q.State)
	}
	return st
}
