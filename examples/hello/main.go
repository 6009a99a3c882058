// Command hello is the smallest job endpoint: an HTTP server that serves
// /jobs/hello, logs each call's slotpoller headers and its body, and
// answers 200, which marks the job done.
//
// It is the quick start's endpoint. Run it beside a node whose
// jobs.base_url points at it:
//
//	go run ./examples/hello                      # listens on 127.0.0.1:8080
//	SLOTPOLLER_JOBS_BASE_URL=http://127.0.0.1:8080 go run . run
//
// It uses the standard library only, so it reads as what an endpoint in
// any language must do: take the call, do the work, answer 2xx (done),
// 408/429/5xx (retried) or another 4xx (failed at once). A real endpoint
// also records the Idempotency-Key of each job it finished, so that a
// re-run after a node died mid-call does nothing twice, and stops its work
// by X-Slotpoller-Deadline (docs/endpoints.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*listen, log); err != nil {
		log.Error("hello endpoint stopped", "err", err)
		os.Exit(1)
	}
}

// run serves until SIGINT or SIGTERM, then shuts down gracefully so a call
// in flight still gets its answer.
func run(listen string, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/jobs/hello", func(w http.ResponseWriter, r *http.Request) {
		hello(w, r, log)
	})
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("hello endpoint listening", "url", "http://"+listen+"/jobs/hello")

	select {
	case err := <-errc:
		return fmt.Errorf("listen on %s: %w", listen, err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shut down: %w", err)
	}
	return nil
}

// hello logs who called and why, and answers 200: the job is done.
func hello(w http.ResponseWriter, r *http.Request, log *slog.Logger) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20)) // a payload is at most 1 MiB
	if err != nil {
		// The node retries a 5xx: a body cut off in transit is worth another try.
		http.Error(w, "reading the body: "+err.Error(), http.StatusInternalServerError)
		return
	}
	attrs := []any{"method", r.Method, "path", r.URL.Path, "body", string(body)}
	for name, values := range r.Header {
		if strings.HasPrefix(name, "X-Slotpoller-") || name == "Idempotency-Key" {
			attrs = append(attrs, name, strings.Join(values, ","))
		}
	}
	log.Info("job call", attrs...)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "hello")
}
