package store

// NoteDue is the note an enqueue sends the farm at commit when it wrote a
// job that is due at once (schema version 15's trigger on the jobs table,
// PostgreSQL only): every door the application enqueues through sends it,
// in the application's own transaction, with no statement of its own.
const NoteDue = "due"

// duePusher is a dialect whose enqueues send NoteDue at commit.
type duePusher interface {
	pushesDue()
}

func (Postgres) pushesDue() {}

// PushesDue reports whether a committed enqueue of a job due now reaches
// the listening nodes as NoteDue, so that one of them claims it at once
// rather than at the next turn.
func (s *Store) PushesDue() bool {
	_, ok := s.d.(duePusher)
	return ok && s.HearsNotes()
}
