package mysql

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/internal/store"
)

// The DSN check refuses each setting that would shift a time or put a
// value into a statement's text, names it, and never shows the password.
func TestDSNCheckRefusesWhatBreaksTimesOrBinding(t *testing.T) {
	const good = "farm:Tr0ub4dor@tcp(127.0.0.1:3306)/farm?parseTime=true&loc=UTC"
	cfg, err := Config(good)
	require.NoError(t, err)
	require.True(t, cfg.ClientFoundRows, "fenced writes count matched rows")
	require.Equal(t, "'+00:00'", cfg.Params["time_zone"])
	for dsn, says := range map[string]string{
		"farm:Tr0ub4dor@tcp(127.0.0.1:3306)/farm?loc=UTC":                                   "parseTime=true",
		"farm:Tr0ub4dor@tcp(127.0.0.1:3306)/farm?parseTime=true":                            "", // loc defaults to UTC
		"farm:Tr0ub4dor@tcp(127.0.0.1:3306)/farm?parseTime=true&loc=Local":                  "loc=UTC",
		"farm:Tr0ub4dor@tcp(127.0.0.1:3306)/farm?parseTime=true&loc=Europe%2FParis":         "loc=UTC",
		"farm:Tr0ub4dor@tcp(127.0.0.1:3306)/farm?parseTime=true&interpolateParams=true":     "interpolateParams",
		"farm:Tr0ub4dor@tcp(127.0.0.1:3306)/farm?parseTime=true&time_zone=%27%2B02%3A00%27": "time_zone",
		"farm:Tr0ub4dor@tcp(127.0.0.1:3306)/farm?parseTime=true&time_zone=%27%2B00%3A00%27": "",
	} {
		_, err := Config(dsn)
		if says == "" {
			require.NoError(t, err, dsn)
			continue
		}
		require.ErrorContains(t, err, says, dsn)
		require.NotContains(t, err.Error(), "Tr0ub4dor", dsn)
	}
}

// A failed login is told as one, without the password, and a time read
// back is UTC whatever the server's or the DSN's session zone.
func TestOpenOnMariaDB(t *testing.T) {
	base := testDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := Config(base)
	require.NoError(t, err)
	cfg.User, cfg.Passwd = "nobody_slotpoller", "Tr0ub4dor"
	_, err = store.Open(ctx, driver{}, cfg.FormatDSN())
	require.ErrorIs(t, err, store.ErrAuthentication)
	require.NotContains(t, err.Error(), "Tr0ub4dor")

	s, err := store.Open(ctx, driver{}, base)
	require.NoError(t, err)
	defer s.Close()
	var zone, isolation string
	require.NoError(t, s.DB().QueryRowContext(ctx, "SELECT @@session.time_zone").Scan(&zone))
	require.Equal(t, "+00:00", zone)
	if s.DB().QueryRowContext(ctx, "SELECT @@session.transaction_isolation").Scan(&isolation) != nil {
		require.NoError(t, s.DB().QueryRowContext(ctx, "SELECT @@session.tx_isolation").Scan(&isolation)) // MariaDB before 11.1
	}
	require.Equal(t, "READ-COMMITTED", strings.ToUpper(isolation))
	now, err := s.Now(ctx)
	require.NoError(t, err)
	require.Equal(t, time.UTC, now.Location())
	require.WithinDuration(t, time.Now(), now, time.Minute, "the database clock read as UTC")
}

// A wake that finds its listener gone (KILL QUERY of a connection id no
// connection has) is told apart from a wake the server refused.
func TestListenerGoneIsAConnectionNoLongerThere(t *testing.T) {
	base := testDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := store.Open(ctx, driver{}, base)
	require.NoError(t, err)
	defer s.Close()
	_, err = s.DB().ExecContext(ctx, store.MySQL{}.Wake(), int64(4_000_000_000))
	require.Error(t, err)
	require.True(t, driver{}.ListenerGone(err), "%v", err)
	_, err = s.DB().ExecContext(ctx, "KILL QUERY") // a syntax error
	require.Error(t, err)
	require.False(t, driver{}.ListenerGone(err), "%v", err)
}

// testDSN is the test MariaDB's DSN; the test skips, saying why, without it.
func testDSN(t *testing.T) string {
	base := os.Getenv("SLOTPOLLER_TEST_MYSQL_DSN")
	if base == "" {
		t.Skip("SLOTPOLLER_TEST_MYSQL_DSN is not set: skipping the MySQL test (set it to e.g. root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC)")
	}
	return base
}
