package admin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// Enqueue throughput on PostgreSQL, through the client package and through
// the HTTP API (a real loopback socket, keep-alive). Run with
// SLOTPOLLER_TEST_POSTGRES_DSN set:
//
//	go test -run '^$' -bench Enqueue -benchtime 3s ./admin/
//
// Each reports jobs/s; docs/benchmarks.md has the figures.

func benchAPI(b *testing.B) (*client.Client, string) {
	storetest.RequirePostgres(b)
	s, db := storetest.OpenDB(b, "postgres")
	c, err := client.New(s.DB(), s.Driver())
	if err != nil {
		b.Fatal(err)
	}
	return c, apiServer(b, s, db, "")
}

func reportJobs(b *testing.B, perOp int) {
	b.ReportMetric(float64(b.N*perOp)/b.Elapsed().Seconds(), "jobs/s")
}

func BenchmarkEnqueueClientBatch1000(b *testing.B) {
	c, _ := benchAPI(b)
	js := make([]client.Job, 1000)
	for i := range js {
		js[i] = client.Job{Endpoint: "/bench", Payload: []byte(`{"order":42}`)}
	}
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := c.EnqueueMany(ctx, js); err != nil {
			b.Fatal(err)
		}
	}
	reportJobs(b, len(js))
}

func BenchmarkEnqueueClientOne(b *testing.B) {
	c, _ := benchAPI(b)
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if _, err := c.Enqueue(ctx, client.Job{Endpoint: "/bench", Payload: []byte(`{"order":42}`)}); err != nil {
			b.Fatal(err)
		}
	}
	reportJobs(b, 1)
}

var benchHTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

func postJSON(b *testing.B, u string, body []byte) {
	resp, err := benchHTTP.Post(u, "application/json", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusCreated {
		b.Fatalf("status %d, %v", resp.StatusCode, err)
	}
}

func BenchmarkEnqueueHTTPOne(b *testing.B) {
	_, base := benchAPI(b)
	body := []byte(`{"endpoint":"/bench","payload":"{\"order\":42}"}`)
	b.ResetTimer()
	for range b.N {
		postJSON(b, base+"/api/v1/jobs", body)
	}
	reportJobs(b, 1)
}

// BenchmarkEnqueueHTTPOneParallel is many application servers enqueueing
// one job per request at once (GOMAXPROCS x 8 clients).
func BenchmarkEnqueueHTTPOneParallel(b *testing.B) {
	_, base := benchAPI(b)
	body := []byte(`{"endpoint":"/bench","payload":"{\"order\":42}"}`)
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			postJSON(b, base+"/api/v1/jobs", body)
		}
	})
	reportJobs(b, 1)
}

func BenchmarkEnqueueHTTPBatch1000(b *testing.B) {
	_, base := benchAPI(b)
	jobs := make([]string, 1000)
	for i := range jobs {
		jobs[i] = `{"endpoint":"/bench","payload":"{\"order\":42}"}`
	}
	body := []byte(fmt.Sprintf(`{"jobs":[%s]}`, strings.Join(jobs, ",")))
	b.ResetTimer()
	for range b.N {
		postJSON(b, base+"/api/v1/jobs/batch", body)
	}
	reportJobs(b, len(jobs))
}
