package store

import (
	"context"
	"time"
)

// LoadStatement is JobsLoad's statement and arguments, for tests that look
// at how the database plans it.
func (s *Store) LoadStatement(nextPoll, window time.Duration, limit int) (string, []any) {
	return s.loadStatement(nextPoll, window, limit)
}

// The admin reads' statements and arguments, as the driver receives them,
// for tests that look at how the database plans them.

func (s *Store) ListStatement(ctx context.Context, f JobFilter) (string, []any, error) {
	q, args, err := s.listStatement(ctx, f)
	return q, s.args(args), err
}

func (s *Store) RetryStatement(ctx context.Context, f JobFilter, actor string) (string, []any, error) {
	q, args, err := s.retryStatement(ctx, f, actor)
	return q, s.args(args), err
}

func (s *Store) ThroughputStatement(ctx context.Context, window time.Duration, limit int) (string, []any, error) {
	q, args, err := s.throughputStatement(ctx, window, limit)
	return q, s.args(args), err
}

func (s *Store) CountsStatement(limit int) (string, []any) {
	q, args := s.countsStatement(limit)
	return q, s.args(args)
}

// SetWindowRows sets the most rows a time window holds to be read by the
// index on created_at (timeWindowRows), on the dialects that count it.
func (s *Store) SetWindowRows(n int) { s.windowRows = n }

// PasswordShapes and Leaks are dsnmask_test.go's DSNs with passwords and
// its check for a password in a message, for the test that opens them
// through the drivers (which this package does not import).
var PasswordShapes = passwordShapes

func Leaks(msg string) []string { return leaks(msg) }
