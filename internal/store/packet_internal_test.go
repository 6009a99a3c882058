package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// A batch is cut into INSERTs of at most insertChunk rows, and where the
// server has a packet limit, into INSERTs whose rows stay under it; a row
// over it alone goes alone. Elsewhere the limit is never read.
func TestInsertBatchesStayUnderThePacketLimit(t *testing.T) {
	ctx := context.Background()
	jobs := func(sizes ...int) []NewJob {
		out := make([]NewJob, len(sizes))
		for i, n := range sizes {
			out[i] = NewJob{Endpoint: "/p", Method: "POST", Payload: make([]byte, n), MaxAttempts: 1, IdempotencyKey: fmt.Sprint("k", i)}
		}
		return out
	}
	repeat := func(n, size int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = size
		}
		return out
	}
	shape := func(bs []insertBatch) []int {
		var rows []int
		next := 0
		for _, b := range bs {
			require.Equal(t, next, b.first, "the batches follow each other")
			next += len(b.jobs)
			rows = append(rows, len(b.jobs))
		}
		return rows
	}
	mysqlAt := func(limit int64) *Store {
		s := New(nil, MySQL{}) // no pool: the limit is known, never read
		s.packet.bytes.Store(limit)
		return s
	}

	// No limit (PostgreSQL) or a large one: rows only.
	for _, s := range []*Store{New(nil, Postgres{}), mysqlAt(64 << 20)} {
		bs, err := s.insertBatches(ctx, "enqueue", jobs(repeat(250, 30_000)...))
		require.NoError(t, err)
		require.Equal(t, []int{100, 100, 50}, shape(bs), s.d.Name())
	}

	// 2 MiB: rows of 30 KB payloads, 67 to a statement (each about 31 KB
	// with its text and parameters).
	s := mysqlAt(2 << 20)
	bs, err := s.insertBatches(ctx, "enqueue", jobs(repeat(250, 30_000)...))
	require.NoError(t, err)
	for _, b := range bs {
		require.LessOrEqual(t, b.bytes+statementBytes, int64(2<<20))
	}
	require.Equal(t, []int{67, 67, 67, 49}, shape(bs))

	// Two payloads of 1 MiB never share a statement; small rows fill the
	// room left; a row over the statement's budget, with a payload under
	// the limit, goes alone.
	bs, err = s.insertBatches(ctx, "enqueue", jobs(1<<20, 1<<20, 10, 10, (2<<20)-100, 10))
	require.NoError(t, err)
	require.Equal(t, []int{1, 3, 1, 1}, shape(bs))
}

func TestGroupDigits(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 524288: "524,288", 1048576: "1,048,576", -1234567: "-1,234,567"} {
		require.Equal(t, want, groupDigits(n))
	}
}
