package store

import "time"

// LoadStatement is JobsLoad's statement and arguments, for tests that look
// at how the database plans it.
func (s *Store) LoadStatement(nextPoll, window time.Duration, limit int) (string, []any) {
	return s.loadStatement(nextPoll, window, limit)
}
