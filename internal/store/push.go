package store

import "context"

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

// noteDue wakes the farm for jobs a write other than an insert made due at
// once (an operator's retry, a queue resumed), which the trigger of the
// inserts does not see. It is sent after the write committed and costs a
// statement only where notes are pushed; a note that fails to go out
// costs a turn's wait, not the write: the next turn finds the jobs.
func (s *Store) noteDue(ctx context.Context) {
	if s.PushesDue() {
		_ = s.NodeNotify(ctx, NoteDue)
	}
}
