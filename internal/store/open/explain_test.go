package open_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	mssql "github.com/microsoft/go-mssqldb"
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/stretchr/testify/require"
)

// Connection failures are told in the operator's terms: what is wrong and
// where to look, before the driver's words.
func TestConnectErrorsSayWhatIsWrong(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	for _, tc := range []struct {
		name      string
		err       error
		kind      error
		says      string
		permanent bool
	}{
		{"postgres wrong password", &pgconn.PgError{Severity: "FATAL", Code: "28P01", Message: `password authentication failed for user "slot"`},
			store.ErrAuthentication, "authentication failed", false},
		{"postgres unknown role", &pgconn.PgError{Severity: "FATAL", Code: "28000", Message: `role "slot" does not exist`},
			store.ErrAuthentication, "user and password", false},
		{"postgres no database", &pgconn.PgError{Severity: "FATAL", Code: "3D000", Message: `database "farm" does not exist`},
			store.ErrNoDatabase, "does not exist", false},
		{"sqlserver login failed", mssql.Error{Number: 18456, Message: "Login failed for user 'slot'."},
			store.ErrAuthentication, "authentication failed", false},
		{"sqlserver no database", mssql.Error{Number: 4060, Message: `Cannot open database "farm" requested by the login.`},
			store.ErrNoDatabase, "does not exist", false},
		{"refused", fmt.Errorf("unable to open tcp connection with host '127.0.0.1:1433': %w", refused),
			store.ErrUnreachable, "refused", false},
		{"no such host", &net.DNSError{Err: "no such host", Name: "db.example", IsNotFound: true},
			store.ErrUnreachable, "host name", false},
		{"timeout", &net.OpError{Op: "dial", Net: "tcp", Err: timeoutError{}},
			store.ErrUnreachable, "no answer", false},
		{"tls", fmt.Errorf("tls: %w", x509.UnknownAuthorityError{}),
			store.ErrTLS, "TLS", false},
		{"tls hostname", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "10.0.0.1"},
			store.ErrTLS, "certificate", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := open.ExplainConnect(fmt.Errorf("connect to database: %w", tc.err))
			require.ErrorIs(t, err, tc.kind)
			require.ErrorContains(t, err, tc.says)
			require.Equal(t, tc.permanent, store.Permanent(err))
			require.ErrorContains(t, err, tc.err.Error(), "the driver's words follow")
			require.Same(t, err, open.ExplainConnect(err), "explained once")
		})
	}
	other := errors.New("something else")
	require.Same(t, other, open.ExplainConnect(other))
	require.Nil(t, open.ExplainConnect(nil))
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// A file that is not a SQLite database is refused for good: waiting will
// not turn it into one.
func TestOpenSQLiteOnAFileThatIsNotADatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.txt")
	require.NoError(t, os.WriteFile(path, []byte("a text file, not a database, long enough to hold a header: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"), 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := open.Store(ctx, "sqlite", path)
	require.ErrorIs(t, err, store.ErrNotADatabase)
	require.ErrorContains(t, err, "not a SQLite database")
	require.ErrorContains(t, err, path)
	require.True(t, store.Permanent(err))

	_, err = open.Store(ctx, "sqlite", filepath.Join(t.TempDir(), "no-such-folder", "farm.db"))
	require.ErrorIs(t, err, store.ErrCannotOpen)
	require.False(t, store.Permanent(err), "the folder may appear (a volume mounted late)")
}

// A DSN without a password scrubs nothing: the user name is no secret, and
// the driver's error keeps its type.
func TestOpenErrorsKeepTheUserWithoutPassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := open.Store(ctx, "postgres", "postgres://postgres@127.0.0.1:1/farm?connect_timeout=2")
	require.ErrorContains(t, err, "postgres database")
	require.ErrorIs(t, err, store.ErrUnreachable)
}
