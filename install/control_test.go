package install

import (
	"errors"
	"testing"

	kservice "github.com/kardianos/service"
	"github.com/stretchr/testify/require"
)

// fakeService is a service manager's view of one service, recording what
// it was asked to do. Restart behaves as on Windows (kardianos/service
// stops, then starts): on a stopped service the stop fails.
type fakeService struct {
	kservice.Service // the methods the tests do not call
	status           kservice.Status
	statusErr        error
	did              []string
}

func (f *fakeService) Platform() string { return "windows-service" }
func (f *fakeService) Status() (kservice.Status, error) {
	return f.status, f.statusErr
}
func (f *fakeService) Start() error {
	f.did = append(f.did, "start")
	f.status = kservice.StatusRunning
	return nil
}
func (f *fakeService) Stop() error {
	f.did = append(f.did, "stop")
	if f.status != kservice.StatusRunning {
		return errors.New("The service has not been started.")
	}
	f.status = kservice.StatusStopped
	return nil
}
func (f *fakeService) Restart() error {
	f.did = append(f.did, "restart")
	if f.status != kservice.StatusRunning {
		return errors.New("Service not active")
	}
	return nil
}

// restart starts a stopped service, as systemctl restart does: a config
// change needs only `slotpoller restart`, whether the node runs or not.
func TestRestartStartsAStoppedService(t *testing.T) {
	stopped := &fakeService{status: kservice.StatusStopped}
	require.NoError(t, control(stopped, ServiceName, "restart"))
	require.Equal(t, []string{"start"}, stopped.did)

	running := &fakeService{status: kservice.StatusRunning}
	require.NoError(t, control(running, ServiceName, "restart"))
	require.Equal(t, []string{"restart"}, running.did)

	missing := &fakeService{statusErr: kservice.ErrNotInstalled}
	require.ErrorContains(t, control(missing, ServiceName, "restart"), "not installed")
	require.Empty(t, missing.did)
}

func TestControlStartAndStop(t *testing.T) {
	s := &fakeService{status: kservice.StatusStopped}
	require.NoError(t, control(s, ServiceName, "start"))
	require.NoError(t, control(s, ServiceName, "stop"))
	require.Equal(t, []string{"start", "stop"}, s.did)
	require.ErrorContains(t, control(s, ServiceName, "reload"), "unknown action")
}

// A service that stops between the status and the restart is started.
func TestRestartStartsAServiceThatStoppedMeanwhile(t *testing.T) {
	s := &stoppingService{fakeService{status: kservice.StatusRunning}}
	require.NoError(t, control(s, ServiceName, "restart"))
	require.Equal(t, []string{"restart", "start"}, s.did)
}

// stoppingService stops just before it is asked to restart.
type stoppingService struct{ fakeService }

func (s *stoppingService) Restart() error {
	s.status = kservice.StatusStopped
	return s.fakeService.Restart()
}
