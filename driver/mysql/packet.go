package mysql

import (
	sqldriver "database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/go-sql-driver/mysql"
)

// readServersMaxPacket makes the driver read the server's
// max_allowed_packet when it connects, unless the DSN sets
// maxAllowedPacket to a value of its own. The driver's default, 64 MiB,
// is larger than MariaDB's 16 MiB and than many servers', and the driver
// puts a value in the statement's packet when it is under that limit's
// share of the statement's parameters: a batch of 100 jobs of 30 KB each
// goes as one packet of 3 MB, which a server at 2 MiB answers by dropping
// the connection. Knowing the server's limit, the driver sends a large
// value in pieces ahead of the statement (COM_STMT_SEND_LONG_DATA), so
// that no packet is over it, and a payload up to the limit gets in. It
// costs a SELECT when a connection is opened.
func readServersMaxPacket(cfg *mysql.Config) {
	if cfg.MaxAllowedPacket == mysql.NewConfig().MaxAllowedPacket {
		cfg.MaxAllowedPacket = 0 // read from the server at each connection
	}
}

// PacketTooLarge (the store's packetRefusals): the server refused a packet
// over max_allowed_packet (1153), or a value sent in pieces over it (1105,
// which says max_allowed_packet, on MariaDB, or max_long_data_size), or the
// driver refused to send a packet over the DSN's maxAllowedPacket.
func (driver) PacketTooLarge(err error) bool {
	switch number(err) {
	case erPacketTooLarge:
		return true
	case erUnknown:
		var me *mysql.MySQLError
		errors.As(err, &me)
		return strings.Contains(me.Message, "max_allowed_packet") || strings.Contains(me.Message, "max_long_data_size")
	}
	return errors.Is(err, mysql.ErrPktTooLarge)
}

// ConnectionLost (packetRefusals): the connection broke under the
// statement. A server that refuses a packet closes the connection at
// once, and the client, still writing the packet, sees the connection
// reset (or the pool's bad connection) rather than the error 1153 the
// server sent.
func (driver) ConnectionLost(err error) bool {
	if errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, sqldriver.ErrBadConn) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne *net.OpError
	return errors.As(err, &ne)
}
