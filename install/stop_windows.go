//go:build windows

package install

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc/mgr"
)

// setStopTimeout sets the service's pre-shutdown timeout to the manager's
// stop timeout. At a system shutdown Windows waits that long for a service
// that accepts the pre-shutdown notice (slotpoller's does, and reports
// its drain's progress) before it moves on; the default is far shorter
// than a drain. A stop asked for by `slotpoller stop` or services.msc has
// no timeout on the manager's side: the program's own bound ends it.
func setStopTimeout(spec ServiceSpec) error {
	m, err := mgr.Connect()
	if err != nil {
		return err
	}
	defer m.Disconnect()
	s, err := m.OpenService(ServiceName)
	if err != nil {
		return err
	}
	defer s.Close()
	info := struct{ PreshutdownTimeout uint32 }{uint32(spec.ManagerStopTimeout().Milliseconds())}
	if err := windows.ChangeServiceConfig2(s.Handle, windows.SERVICE_CONFIG_PRESHUTDOWN_INFO, (*byte)(unsafe.Pointer(&info))); err != nil {
		return fmt.Errorf("set the pre-shutdown timeout: %w", err)
	}
	return nil
}
