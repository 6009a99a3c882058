//go:build unix

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/storetest"
	"github.com/slotpoller/slotpoller/jobs"
	"github.com/stretchr/testify/require"
)

// The dashboard's Search page in a browser: the search box finds a job
// by its unique key and by text in its payload, and links to its page.
func TestDashboardFindsAJob(t *testing.T) {
	b := startBrowser(t)
	s, n, port := dashboardNode(t)
	ctx := context.Background()
	id, err := jobs.Enqueue(ctx, s, store.NewJob{Endpoint: "/jobs/invoice", MaxAttempts: 1, Delay: time.Hour,
		UniqueKey: "invoice-42", Payload: []byte(`{"customer":"ACME Corp"}`)})
	require.NoError(t, err)

	b.open(fmt.Sprintf("http://127.0.0.1:%d/#/search", port))
	b.waitFor(`#f-q`)
	b.waitJS("a search typed and sent", `const q = document.querySelector('#f-q'); q.value = 'invoice-42'; q.form.requestSubmit(); return true`)
	b.waitFor(fmt.Sprintf(`#search tr[data-job="%d"][data-matched="unique_key"] a[href="#/jobs/%d"]`, id, id))
	b.open(fmt.Sprintf("http://127.0.0.1:%d/#/search?q=%s", port, "ACME%20Corp"))
	b.waitFor(fmt.Sprintf(`#search tr[data-job="%d"][data-matched="payload"]`, id))
	n.stop(t)
}

// dashboardNode starts one node on a SQLite farm of its own, with its
// admin endpoint (the dashboard) on a free port, and endpoints that
// answer 204; it returns once the node is live.
func dashboardNode(t *testing.T) (*store.Store, *node, int) {
	t.Helper()
	s, db := storetest.OpenDB(t, "sqlite")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	port := freePort(t)
	n := startNode(t, env("sqlite", db.DSN, "node-a", srv.URL, append(db.ExtraEnv(), "SLOTPOLLER_ADMIN_LISTEN=127.0.0.1:"+strconv.Itoa(port))...), "node-a")
	waitFor(t, 30*time.Second, "the node live", func() bool { return liveNodes(t, s) == 1 })
	return s, n, port
}
