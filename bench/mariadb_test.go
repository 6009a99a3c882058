package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The first six counts are those performance_schema gave for a
// go-sql-driver/mysql client on MariaDB 10.11 (ten queries with an
// argument, five without, and a transaction of one statement with an
// argument), the rest events it may meet: each execution counts once as a
// statement, whichever protocol carried it, and the prepared statements'
// own round trips apart.
func TestClassifyStatementEvents(t *testing.T) {
	c := classifyStatementEvents(map[string]int64{
		"statement/sql/select":     5,
		"statement/sql/begin":      1,
		"statement/sql/commit":     1,
		"statement/com/Prepare":    11,
		"statement/com/Execute":    11,
		"statement/com/Close stmt": 11,
		"statement/com/Query":      2, // text that did not parse
		"statement/com/Ping":       3,
		"statement/com/Quit":       1,
		"statement/sp/stmt":        7, // inside a CALL: counted as the CALL
		"statement/sql/call":       1,
		"wait/io/file/sql/binlog":  9, // not a statement event
	})
	require.Equal(t, commandCounts{statements: 5 + 1 + 1 + 11 + 2 + 1, prepares: 11, closes: 11, other: 4}, c)
	require.Equal(t, commandCounts{}, classifyStatementEvents(nil))
}
