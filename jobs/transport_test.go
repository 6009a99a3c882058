package jobs

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The client keeps a connection for each call the node may make at once:
// with net/http's default of 2 idle connections per host, a node running
// 16 calls would close 14 connections after every burst and dial them
// again at the next.
func TestClientKeepsAConnectionPerCall(t *testing.T) {
	tr := NewClient(40).Transport.(*http.Transport)
	require.GreaterOrEqual(t, tr.MaxIdleConnsPerHost, 40)
	require.True(t, tr.MaxIdleConns == 0 || tr.MaxIdleConns >= 40, "MaxIdleConns %d", tr.MaxIdleConns)
	require.Nil(t, tr.Proxy, "the endpoints are on the node itself: no proxy")

	const calls = 16
	var dialed atomic.Int64
	release := make(chan struct{})
	var arrived sync.WaitGroup
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		<-release
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialed.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	base, _ := url.Parse(srv.URL)
	inv := &Invoker{Base: base, Client: NewClient(calls)}
	var failed atomic.Int64
	burst := func() {
		arrived.Add(calls)
		var done sync.WaitGroup
		for range calls {
			done.Add(1)
			go func() {
				defer done.Done()
				if res := inv.Invoke(t.Context(), Call{Endpoint: "/x", Timeout: 10 * time.Second}); res.Verdict != Succeeded {
					failed.Add(1)
				}
			}()
		}
		arrived.Wait() // all the calls at once
		for range calls {
			release <- struct{}{}
		}
		done.Wait()
	}
	burst()
	burst()
	require.Zero(t, failed.Load(), "calls that did not succeed")
	require.EqualValues(t, calls, dialed.Load(), "connections dialed for two bursts of %d calls", calls)
}
