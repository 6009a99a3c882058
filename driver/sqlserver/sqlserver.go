// Package sqlserver is slotpoller's support for SQL Server, Azure SQL and
// Babelfish, through github.com/microsoft/go-mssqldb (database/sql's
// "sqlserver" driver, which binds @p1..@pN): an application gives
// Driver() to client.New with the *sql.DB it opened. It imports go-mssqldb
// (which registers "sqlserver" with database/sql) and no other database
// driver.
//
// Invariants: every parameter is bound with a declared type that does not
// depend on its value (one cached plan per statement); errors are told
// apart by their server error numbers, anywhere among a statement's
// errors, and Babelfish's by their text.
package sqlserver

import (
	"database/sql"
	"errors"
	"strings"

	mssql "github.com/microsoft/go-mssqldb"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/internal/store"
)

// Driver is SQL Server's support, for client.New (client.WithSchema names
// the schema of slotpoller's tables).
func Driver() client.Driver { return driver{} }

// driver implements store.Driver for go-mssqldb.
type driver struct{}

// Dialect is the SQL Server dialect with slotpoller's tables in schema (""
// for the default).
func (driver) Dialect(schema string) (store.Dialect, error) { return store.NewSQLServer(schema) }

// Open opens a pool of dsn. The "sqlserver" driver name makes go-mssqldb
// bind @p1..@pN.
func (driver) Open(dsn string) (*sql.DB, error) { return sql.Open("sqlserver", dsn) }

// Bind gives every parameter a declared type that does not depend on its
// value, so that SQL Server keeps one cached plan per statement: go-mssqldb
// declares a string as nvarchar(len), one plan per length combination, so
// strings go as nvarchar(max) (mssql.NVarCharMax), and a NULL string as the
// nvarchar(4000) go-mssqldb gives sql.NullString. A max parameter compared
// with a key column of nvarchar(n) is the same type, so the column is not
// converted and the comparison stays a seek. Times go as datetime2 (the
// dialect's Arg made a valid one a civil.DateTime), a NULL time as a NULL
// datetime2. Integers are bigint whatever their value.
// A []byte stays varbinary(len): go-mssqldb has no fixed-size binary type;
// only the writes of a payload carry one.
func (driver) Bind(v any) any {
	switch x := v.(type) {
	case string:
		return mssql.NVarCharMax(x)
	case sql.NullString:
		if x.Valid {
			return mssql.NVarCharMax(x.String)
		}
	case sql.NullTime:
		if !x.Valid {
			return mssql.NullDateTime{}
		}
	}
	return v
}

// SQL Server error numbers slotpoller acts on.
const (
	mssqlDeadlockVictim = 1205 // chosen as deadlock victim; the statement was rolled back
	mssqlLockTimeout    = 1222 // lock request time out period exceeded (SET LOCK_TIMEOUT)
	mssqlDuplicateKey   = 2627 // violation of a PRIMARY KEY or UNIQUE constraint
	mssqlDuplicateIndex = 2601 // duplicate key row in a unique index
	mssqlInvalidObject  = 208  // invalid object name: the table does not exist
)

// Retryable: a deadlock victim's statement was rolled back whole, and a
// lock timeout changed nothing, so both can simply be sent again.
//
// Azure SQL's transient errors during a reconfiguration or failover
// (40613, 40501, 40197, 49918-49920, 10928, 10929) are retried too: the
// statements that can meet them are fenced or idempotent, except an enqueue
// without a unique key, which a retry after a lost acknowledgement could
// write twice.
func (driver) Retryable(err error) bool {
	return mssqlErrorIs(err, mssqlDeadlockVictim, mssqlLockTimeout, 40613, 40501, 40197, 49918, 49919, 49920, 10928, 10929) ||
		mssqlMessageHas(err, babelfishError, "Lock request time out period exceeded")
}

// babelfishError is the number Babelfish (Aurora's T-SQL layer) gives the
// errors it has no SQL Server number for, such as a lock timeout (1222 on
// SQL Server) or a missing table (208): they are told apart by their text.
const babelfishError = 33557097

func (driver) UniqueViolation(err error) bool {
	return mssqlErrorIs(err, mssqlDuplicateKey, mssqlDuplicateIndex)
}

// UndefinedTable: Babelfish says PostgreSQL's `relation "..." does not exist`.
func (driver) UndefinedTable(err error) bool {
	return mssqlErrorIs(err, mssqlInvalidObject) || mssqlMessageHas(err, babelfishError, "does not exist")
}

// mssqlMessageHas reports whether err carries a server error of the number
// whose message contains text.
func mssqlMessageHas(err error, number int32, text string) bool {
	var e mssql.Error
	if !errors.As(err, &e) {
		return false
	}
	for _, x := range append([]mssql.Error{e}, e.All...) {
		if x.Number == number && strings.Contains(x.Message, text) {
			return true
		}
	}
	return false
}

// mssqlErrorIs reports whether err, or any of the server errors it carries
// (one statement can raise several), has one of the numbers.
func mssqlErrorIs(err error, numbers ...int32) bool {
	var e mssql.Error
	if !errors.As(err, &e) {
		return false
	}
	for _, x := range append([]mssql.Error{e}, e.All...) {
		for _, n := range numbers {
			if x.Number == n {
				return true
			}
		}
	}
	return false
}

// SQL Server error numbers of failed logins.
const (
	mssqlLoginFailed     = 18456 // login failed for user
	mssqlPasswordExpired = 18488 // the password must be changed
	mssqlUntrustedDomain = 18452 // Windows login from an untrusted domain
	mssqlCannotOpenDB    = 4060  // cannot open the database requested by the login
)

// ConnectError tells a failed login and a database the login cannot open
// by their error numbers.
func (driver) ConnectError(err error) error {
	var me mssql.Error
	if errors.As(err, &me) {
		switch me.Number {
		case mssqlLoginFailed, mssqlPasswordExpired, mssqlUntrustedDomain:
			return store.ErrAuthentication
		case mssqlCannotOpenDB:
			return store.ErrNoDatabase
		}
	}
	return nil
}
