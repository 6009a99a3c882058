package store

import "time"

// LoadStatement is JobsLoad's statement and arguments, for tests that look
// at how the database plans it.
func (s *Store) LoadStatement(nextPoll, window time.Duration, limit int) (string, []any) {
	return s.loadStatement(nextPoll, window, limit)
}

// The admin reads' statements and arguments, as the driver receives them,
// for tests that look at how the database plans them.

func (s *Store) ListStatement(f JobFilter) (string, []any) {
	q, args := s.listStatement(f)
	return q, s.args(args)
}

func (s *Store) RetryStatement(f JobFilter, actor string) (string, []any) {
	q, args := s.retryStatement(f, actor)
	return q, s.args(args)
}

func (s *Store) ThroughputStatement(window time.Duration, limit int) (string, []any) {
	q, args := s.throughputStatement(window, limit)
	return q, s.args(args)
}

func (s *Store) CountsStatement(limit int) (string, []any) {
	q, args := s.countsStatement(limit)
	return q, s.args(args)
}
