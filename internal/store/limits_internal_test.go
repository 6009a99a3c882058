package store

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRoomOf(t *testing.T) {
	none := sql.NullInt64{}
	l := func(n int64) sql.NullInt64 { return sql.NullInt64{Int64: n, Valid: true} }
	cases := []struct {
		name                      string
		maxRunning, perNode, rate sql.NullInt64
		running, mine, used       int64
		want                      int
	}{
		{"no limit", none, none, none, 5, 5, 5, -1},
		{"farm limit", l(4), none, none, 1, 0, 0, 3},
		{"per node is tighter", l(4), l(1), none, 1, 0, 0, 1},
		{"node full", l(4), l(1), none, 1, 1, 0, 0},
		{"rate is tighter", l(10), none, l(5), 0, 0, 3, 2},
		{"lowered below what runs", l(2), none, none, 5, 0, 0, 0},
		{"rate used beyond", none, none, l(5), 0, 0, 9, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, roomOf(c.maxRunning, c.running, c.perNode, c.mine, c.rate, c.used))
		})
	}
}
