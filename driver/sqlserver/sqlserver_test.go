package sqlserver_test

import (
	"errors"
	"fmt"
	"testing"

	mssql "github.com/microsoft/go-mssqldb"
	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/driver/sqlserver"
)

func duplicate(number int32) error {
	return mssql.Error{Number: number, Class: 14, Message: "Cannot insert duplicate key"}
}

func TestErrors(t *testing.T) {
	d := sqlserver.Driver()
	deadlock := mssql.Error{Number: 1205, Message: "Transaction (Process ID 52) was deadlocked on lock resources with another process and has been chosen as the deadlock victim. Rerun the transaction."}
	require.True(t, d.Retryable(deadlock))
	require.True(t, d.Retryable(fmt.Errorf("claim jobs: %w", deadlock)), "wrapped")
	require.True(t, d.Retryable(mssql.Error{Number: 1222}), "lock timeout")
	require.True(t, d.Retryable(mssql.Error{Number: 3621, All: []mssql.Error{{Number: 1205}, {Number: 3621}}}), "anywhere in the statement's errors")
	require.False(t, d.Retryable(mssql.Error{Number: 208}), "invalid object name")
	require.False(t, d.Retryable(errors.New("deadlock")))
	require.False(t, d.Retryable(nil))

	// Babelfish reports some errors under its own number, with SQL
	// Server's text or PostgreSQL's.
	require.True(t, d.Retryable(mssql.Error{Number: 33557097, Message: "Lock request time out period exceeded."}), "Babelfish's lock timeout")
	require.True(t, d.UndefinedTable(mssql.Error{Number: 208, Message: "Invalid object name 'x.schema_version'."}))
	require.True(t, d.UndefinedTable(fmt.Errorf("read: %w", mssql.Error{Number: 33557097, Message: `relation "test_x.schema_version" does not exist`})), "Babelfish's missing table")
	require.False(t, d.UndefinedTable(mssql.Error{Number: 33557097, Message: "Lock request time out period exceeded."}))
	require.False(t, d.UndefinedTable(deadlock))

	require.True(t, d.UniqueViolation(duplicate(2627)), "PRIMARY KEY / UNIQUE constraint")
	require.True(t, d.UniqueViolation(fmt.Errorf("x: %w", duplicate(2601))), "unique index")
	require.False(t, d.UniqueViolation(deadlock))
	require.False(t, d.UniqueViolation(nil))
}
