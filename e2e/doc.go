// Package e2e runs the built slotpoller binary as several real node
// processes against one database and checks, from what a recording job
// endpoint saw, the promises the farm makes. The tests use Unix signals
// (kill -9, SIGSTOP) and build only on Unix.
package e2e
