package store

// The packet limit of a MySQL or MariaDB server, max_allowed_packet: the
// server refuses a packet from a client over it, and drops the
// connection (error 1153, or a connection reset the client sees before
// the error). A statement's values travel in one packet, except those a
// driver sends in pieces ahead of it (go-sql-driver/mysql's long data),
// and a value sent in pieces is refused over the limit as well (error
// 1105). So an enqueue keeps each of its statements under the limit, and
// refuses before it sends anything a payload that no statement can carry.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
)

// ErrPacketTooLarge is in the chain of an error that says a job did not
// fit in the database server's packet limit (MySQL's max_allowed_packet).
// Nothing of the enqueue was written.
var ErrPacketTooLarge = errors.New("over the MySQL server's max_allowed_packet")

// packetBound is a dialect whose server refuses a packet over a limit of
// its configuration (MySQL's max_allowed_packet).
type packetBound interface {
	// MaxPacket is a statement returning the limit, in bytes, of the
	// connection that runs it.
	MaxPacket() string
}

// MaxPacket (packetBound): the session's value is the global one at the
// time the connection was opened, which is what the server holds the
// connection to.
func (MySQL) MaxPacket() string { return "SELECT @@max_allowed_packet" }

// packetRefusals is a driver that tells the errors of a packet over the
// server's limit (packetBound).
type packetRefusals interface {
	// PacketTooLarge reports whether err says the server (or the driver)
	// refused a packet or a value over the limit.
	PacketTooLarge(err error) bool
	// ConnectionLost reports whether err says the connection broke: what
	// a client sees of a packet over the limit when the server drops the
	// connection before its error is read.
	ConnectionLost(err error) bool
}

// minMaxPacket is the smallest max_allowed_packet MySQL and MariaDB
// accept: a statement no larger fits in any server's, so a connection
// lost under it was not lost to the limit.
const minMaxPacket = 1024

// packetLimit is the server's max_allowed_packet as the store last read it
// (0: not yet), shared by a store and the stores WithTx makes, so that an
// application's client reads it once, not in each of its transactions.
type packetLimit struct{ bytes atomic.Int64 }

// maxPacket returns the most bytes the database server takes in a packet,
// or 0 where the dialect has no such limit. It is read once and kept;
// fresh reads it again, for the value to quote when refusing (the
// server's may have been raised since). It reads through the store's
// connection: the caller's transaction in a store of WithTx.
func (s *Store) maxPacket(ctx context.Context, fresh bool) (int64, error) {
	b, ok := s.d.(packetBound)
	if !ok {
		return 0, nil
	}
	if n := s.packet.bytes.Load(); n > 0 && !fresh {
		return n, nil
	}
	var n int64
	if err := s.queryRow(ctx, s.statement(b.MaxPacket())).Scan(&n); err != nil {
		return 0, fmt.Errorf("read the MySQL server's max_allowed_packet: %w", err)
	}
	s.packet.bytes.Store(n)
	return n, nil
}

// Estimates of what a statement of new jobs sends, in bytes, beyond the
// values' own bytes: generous, so that a statement estimated under the
// limit is under it.
const (
	// paramBytes is the most a parameter adds besides its value: its type
	// (2 bytes), its length (at most 9) and a bit of the NULL map; and
	// the whole of a number or a time, sent as at most 26 characters.
	paramBytes = 32
	// statementBytes is the part of an INSERT's packets that is not its
	// rows': the text before VALUES (about 200 bytes), the packets'
	// headers.
	statementBytes = 4 << 10
)

// insertBatch is the jobs one INSERT writes, from jobs[first] of the
// enqueue, with the estimate of the bytes its rows send.
type insertBatch struct {
	jobs  []NewJob
	first int
	bytes int64
}

// rowBytes estimates what a new job's row adds to a multi-row INSERT:
// its VALUES text and its parameters.
func (s *Store) rowBytes(j NewJob) int64 {
	text, args := s.jobValues(j)
	n := int64(len(s.statement(text))) + 4 // "(", ")", ",\n  " around it
	for _, a := range args {
		n += paramBytes
		switch v := a.(type) {
		case []byte:
			n += int64(len(v))
		case string:
			n += int64(len(v))
		case sql.NullString:
			n += int64(len(v.String))
		}
	}
	return n
}

// insertBatches cuts jobs into the INSERTs that write them: at most
// insertChunk rows each, and where the server has a packet limit, rows
// whose estimate stays under it. A job too large for any statement is
// refused first, so that nothing of the enqueue is sent (what names the
// enqueue in the error). A row over the limit alone is written alone:
// a driver that sends its payload in pieces gets it through.
func (s *Store) insertBatches(ctx context.Context, what string, jobs []NewJob) ([]insertBatch, error) {
	_, bound := s.d.(packetBound)
	limit := int64(-1) // none, or not known
	if bound {
		// Unknown when the server does not answer: the enqueue's own
		// statement then says why, and no error of this read hides it.
		if n, err := s.maxPacket(ctx, false); err == nil {
			limit = n
		}
	}
	if limit > 0 {
		if err := s.payloadsFit(ctx, what, jobs, limit); err != nil {
			return nil, err
		}
	}
	var out []insertBatch
	b := insertBatch{}
	for i, j := range jobs {
		var row int64 // counted where there is a limit
		if bound {
			row = s.rowBytes(j)
		}
		if i > b.first && (i-b.first == insertChunk || (limit > 0 && b.bytes+row > limit-statementBytes)) {
			b.jobs = jobs[b.first:i]
			out, b = append(out, b), insertBatch{first: i}
		}
		b.bytes += row
	}
	b.jobs = jobs[b.first:]
	return append(out, b), nil
}

// jobFits refuses, before anything is sent, a job whose payload no
// statement carries (payloadsFit). It sends nothing and counts nothing
// where the dialect has no packet limit: every enqueue comes here.
func (s *Store) jobFits(ctx context.Context, what string, j NewJob) error {
	if _, bound := s.d.(packetBound); !bound {
		return nil
	}
	// Unknown when the server does not answer: the enqueue's own
	// statement then says why.
	if limit, err := s.maxPacket(ctx, false); err == nil && limit > 0 {
		return s.payloadsFit(ctx, what, []NewJob{j}, limit)
	}
	return nil
}

// payloadsFit refuses the first of jobs whose payload is over the
// server's limit (as read: limit): no statement carries it, in one packet
// or in pieces. The limit is read again before refusing, as a DBA may
// have raised it since it was read (the value read before stands if the
// server does not answer).
func (s *Store) payloadsFit(ctx context.Context, what string, jobs []NewJob, limit int64) error {
	over := func(limit int64) int {
		for i, j := range jobs {
			if int64(len(j.Payload)) > limit {
				return i
			}
		}
		return -1
	}
	if over(limit) < 0 {
		return nil
	}
	if fresh, err := s.maxPacket(ctx, true); err == nil {
		limit = fresh
	}
	i := over(limit)
	if i < 0 {
		return nil
	}
	subject := "the payload"
	if len(jobs) > 1 {
		subject = fmt.Sprintf("job %d's payload", i)
	}
	return fmt.Errorf("%s: %w", what, &packetError{subject: subject, bytes: int64(len(jobs[i].Payload)), limit: limit, payload: true})
}

// packetError explains err, the failure of the statement that wrote
// jobs (subject names it; bytes is its estimate, insertBatches'), when the
// server's packet limit caused it: the driver says the packet or a value
// was refused, or the connection broke while a statement over the limit
// was sent. Other errors are returned as they are. The limit quoted is
// read again outside a caller's transaction (the connection that failed
// is gone; a caller's transaction may hold the pool's only connection),
// else the one read before.
func (s *Store) packetError(ctx context.Context, subject string, jobs []NewJob, bytes int64, err error) error {
	r, ok := s.drv.(packetRefusals)
	if err == nil || !ok || errors.Is(err, ErrPacketTooLarge) {
		return err
	}
	refused := r.PacketTooLarge(err)
	if !refused && (!r.ConnectionLost(err) || bytes <= minMaxPacket) {
		return err
	}
	limit := s.packet.bytes.Load()
	if !s.callerTx {
		if n, rerr := s.maxPacket(ctx, true); rerr == nil && n > 0 {
			limit = n
		}
	}
	if !refused && (limit == 0 || bytes <= limit) {
		return err // the connection broke for another reason
	}
	var payloads int64
	for _, j := range jobs {
		payloads += int64(len(j.Payload))
	}
	return &packetError{subject: subject, bytes: bytes, payloads: payloads, limit: limit, lost: !refused, err: err}
}

// packetError says what did not fit in the server's max_allowed_packet,
// and what to do about it.
type packetError struct {
	subject  string // "the payload", "job 7's payload", "the statement of jobs 0 to 99"
	bytes    int64  // the payload's size, or the statement's estimate
	payloads int64  // a statement's: the bytes of its jobs' payloads
	limit    int64  // the server's max_allowed_packet; 0 when it could not be read
	payload  bool   // a payload over the limit, refused before anything was sent
	lost     bool   // the server dropped the connection
	err      error  // the driver's error
}

func (e *packetError) Error() string {
	limit := ""
	if e.limit > 0 {
		limit = " of " + groupDigits(e.limit) + " bytes"
	}
	const raise = "raise max_allowed_packet (2 MiB lets in any job)"
	if e.payload {
		return fmt.Sprintf("%s of %s bytes does not fit in the MySQL server's max_allowed_packet%s: %s",
			e.subject, groupDigits(e.bytes), limit, raise)
	}
	lost := ""
	if e.lost {
		lost = " (the server dropped the connection)"
	}
	// A statement over the limit is sent by a driver that puts a large
	// value in the statement's packet: one whose DSN sets
	// maxAllowedPacket (an application's pool: the driver's default is
	// 64 MiB), or told a value the server has lowered since.
	return fmt.Sprintf("%s, about %s bytes with %s bytes of payload, does not fit in the MySQL server's max_allowed_packet%s%s: "+
		"%s, or set maxAllowedPacket=0 in the DSN, so that the driver reads the server's and sends a large payload in pieces",
		e.subject, groupDigits(e.bytes), groupDigits(e.payloads), limit, lost, raise)
}

func (e *packetError) Unwrap() []error {
	if e.err == nil {
		return []error{ErrPacketTooLarge}
	}
	return []error{ErrPacketTooLarge, e.err}
}

// groupDigits writes n with a comma between each group of three digits:
// 1,048,576.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	out := make([]byte, 0, len(s)+len(s)/3+1)
	if neg {
		out = append(out, '-')
	}
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
