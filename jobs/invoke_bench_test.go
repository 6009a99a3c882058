package jobs

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// BenchmarkInvoke is one job call to an endpoint on the same machine that
// answers 204 at once, as in the burn-down bench: what a call costs the
// node beyond the endpoint's own work. Its allocations are the figure to
// watch (go test -bench Invoke -benchmem ./jobs).
func BenchmarkInvoke(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	base, err := url.Parse(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	// The bench's jobs each name their own endpoint; a farm's jobs mostly
	// share a few, which an invoker resolves once.
	for _, bc := range []struct {
		name     string
		endpoint func(i int) string
	}{
		{"endpoint-per-job", func(i int) string { return "/job/b" + strconv.Itoa(i) }},
		{"one-endpoint", func(int) string { return "/jobs/send-mail" }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			inv := &Invoker{Base: base, Client: NewClient(16)}
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				res := inv.Invoke(ctx, Call{JobID: int64(i), Node: "node-1", Token: 1, Attempt: 1,
					Endpoint: bc.endpoint(i), Payload: []byte(`{"key":"b"}`), Timeout: 30 * time.Second})
				if res.Verdict != Succeeded {
					b.Fatalf("call %d: %+v", i, res)
				}
			}
		})
	}
}

// BenchmarkResolveEndpoint is the check and join every call makes.
func BenchmarkResolveEndpoint(b *testing.B) {
	base, _ := url.Parse("http://127.0.0.1:8080")
	b.ReportAllocs()
	for range b.N {
		if _, err := ResolveEndpoint(base, "/job/b12345?x=1"); err != nil {
			b.Fatal(err)
		}
	}
}
