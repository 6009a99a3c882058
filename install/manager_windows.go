//go:build windows

package install

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc/mgr"
)

// configureManager sets what kardianos/service leaves at Windows'
// defaults:
//
//   - The pre-shutdown timeout, to the manager's stop timeout. At a
//     system shutdown Windows waits that long for a service that accepts
//     the pre-shutdown notice (slotpoller's does, and reports its drain's
//     progress) before it moves on; the default is far shorter than a
//     drain. A stop asked for by `slotpoller stop` or services.msc has no
//     timeout on the manager's side: the program's own bound ends it, and
//     `slotpoller stop` waits this long at most.
//   - The recovery actions (restart after 5 s) apply to failures that are
//     no crash too: a node that gives up reports its service stopped with
//     an exit code, which Windows otherwise takes for a clean stop.
//   - The error control, to normal: a start at boot that fails is logged
//     (kardianos/service registers the service with "ignore").
//
// A service manager that does not know the setting for failures that
// are no crash (Wine's) leaves a note instead of an error.
func configureManager(spec ServiceSpec) (notes []string, err error) {
	m, err := mgr.Connect()
	if err != nil {
		return nil, err
	}
	defer m.Disconnect()
	s, err := m.OpenService(spec.name())
	if err != nil {
		return nil, err
	}
	defer s.Close()
	info := struct{ PreshutdownTimeout uint32 }{uint32(spec.ManagerStopTimeout().Milliseconds())}
	if err := windows.ChangeServiceConfig2(s.Handle, windows.SERVICE_CONFIG_PRESHUTDOWN_INFO, (*byte)(unsafe.Pointer(&info))); err != nil {
		return nil, fmt.Errorf("set the pre-shutdown timeout: %w", err)
	}
	switch err := s.SetRecoveryActionsOnNonCrashFailures(true); {
	case errors.Is(err, windows.ERROR_INVALID_LEVEL):
		notes = append(notes, fmt.Sprintf("the service manager does not take the recovery setting for failures that are no crash (%v): "+
			"a node that gives up is not restarted; `slotpoller start` starts it again", err))
	case err != nil:
		return nil, fmt.Errorf("turn the recovery actions on for failures that are no crash: %w", err)
	}
	const same = windows.SERVICE_NO_CHANGE
	if err := windows.ChangeServiceConfig(s.Handle, same, same, windows.SERVICE_ERROR_NORMAL,
		nil, nil, nil, nil, nil, nil, nil); err != nil {
		return notes, fmt.Errorf("set the error control to normal: %w", err)
	}
	return notes, nil
}
