package mysql_test

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/slotpoller/slotpoller/driver/mysql"
	"github.com/slotpoller/slotpoller/internal/storetest"
)

// The node's connections read the server's max_allowed_packet when they
// open, unless the DSN sets maxAllowedPacket itself.
func TestConfigReadsTheServersMaxAllowedPacket(t *testing.T) {
	const dsn = "farm:pw@tcp(127.0.0.1:3306)/farm?parseTime=true&loc=UTC"
	cfg, err := mysql.Config(dsn)
	require.NoError(t, err)
	require.Zero(t, cfg.MaxAllowedPacket, "0: the driver reads the server's value at each connection")
	cfg, err = mysql.Config(dsn + "&maxAllowedPacket=4194304")
	require.NoError(t, err)
	require.Equal(t, 4194304, cfg.MaxAllowedPacket, "the DSN's own value is kept")
}

// A value up to the server's max_allowed_packet reaches a server whose
// limit is under the driver's default (64 MiB) through the node's pool,
// which sends it in pieces; a pool with the driver's default sends it in
// one packet, which the server refuses, dropping the connection.
func TestOpenSendsAValueUpToTheServersMaxAllowedPacket(t *testing.T) {
	db := storetest.PrivateMariaDB(t, "--max-allowed-packet=1M")
	ctx := context.Background()
	value := make([]byte, 1<<20)

	node, err := mysql.Driver().(interface{ Open(string) (*sql.DB, error) }).Open(db.DSN)
	require.NoError(t, err)
	defer node.Close()
	var n int
	require.NoError(t, node.QueryRowContext(ctx, "SELECT LENGTH(?)", value).Scan(&n))
	require.Equal(t, len(value), n)

	plain, err := sql.Open("mysql", db.DSN)
	require.NoError(t, err)
	defer plain.Close()
	err = plain.QueryRowContext(ctx, "SELECT LENGTH(?)", value).Scan(&n)
	require.Error(t, err, "the driver's default sends the value in the statement's packet")
	packets := mysql.Driver().(interface {
		PacketTooLarge(error) bool
		ConnectionLost(error) bool
	})
	require.True(t, packets.PacketTooLarge(err) || packets.ConnectionLost(err), "told as a refused packet or a lost connection: %v", err)
}

// The errors of a packet over the limit are told apart from the others.
func TestPacketErrorsToldApart(t *testing.T) {
	d := mysql.Driver().(interface {
		PacketTooLarge(error) bool
		ConnectionLost(error) bool
	})
	wrap := func(err error) error { return fmt.Errorf("enqueue job for /x: %w", err) }
	for _, err := range []error{
		&gomysql.MySQLError{Number: 1153, Message: "Got a packet bigger than 'max_allowed_packet' bytes"},
		&gomysql.MySQLError{Number: 1105, Message: "Parameter of prepared statement which is set through mysql_send_long_data() is longer than 'max_allowed_packet' bytes"},
		gomysql.ErrPktTooLarge,
	} {
		require.True(t, d.PacketTooLarge(wrap(err)), "%v", err)
	}
	for _, err := range []error{
		&gomysql.MySQLError{Number: 1105, Message: "Unknown error"},
		&gomysql.MySQLError{Number: 1062, Message: "Duplicate entry"},
		sqldriver.ErrBadConn,
		errors.New("packet"),
	} {
		require.False(t, d.PacketTooLarge(wrap(err)), "%v", err)
	}
	for _, err := range []error{
		sqldriver.ErrBadConn,
		gomysql.ErrInvalidConn,
		&net.OpError{Op: "write", Net: "tcp", Err: syscall.ECONNRESET},
		syscall.EPIPE,
	} {
		require.True(t, d.ConnectionLost(wrap(err)), "%v", err)
	}
	for _, err := range []error{
		&gomysql.MySQLError{Number: 1153},
		context.DeadlineExceeded,
		errors.New("connection"),
	} {
		require.False(t, d.ConnectionLost(wrap(err)), "%v", err)
	}
}
