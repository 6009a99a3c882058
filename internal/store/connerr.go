package store

// Why a connection failed, in the operator's terms. Drivers say it each in
// their own words (a SQLSTATE, a server error number, a wrapped network
// error); a node that cannot connect logs what is wrong and where to look.

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
)

// The kinds of connection failure ExplainConnect tells apart.
var (
	ErrAuthentication = errors.New("authentication failed: check the user and password in database.dsn, and that the login may connect")
	ErrNoDatabase     = errors.New("the database does not exist: check the database name in database.dsn, or create it")
	ErrUnreachable    = errors.New("the database server is unreachable")
	ErrTLS            = errors.New("TLS failed: the server's certificate is not trusted for this host, or the server does not speak TLS as database.dsn asks")
	ErrNotADatabase   = errors.New("the file is not a SQLite database: check database.dsn, it names some other file")
	ErrCannotOpen     = errors.New("cannot open the SQLite file: its folder must exist and be writable by the node's user")
)

// ExplainConnect prefixes a connection error with what it means (the
// kinds above, which errors.Is finds), keeping the driver's error in the
// chain. drivers are those whose errors err may carry: each tells its own
// (a login failure's number, a file that is not a database); the network's
// and TLS's failures are told here. Other errors, and errors explained
// already, are returned as they are.
func ExplainConnect(err error, drivers ...Driver) error {
	if err == nil {
		return nil
	}
	for _, k := range []error{ErrAuthentication, ErrNoDatabase, ErrUnreachable, ErrTLS, ErrNotADatabase, ErrCannotOpen} {
		if errors.Is(err, k) {
			return err
		}
	}
	kind, detail := classify(err, drivers)
	if kind == nil {
		return err
	}
	if detail != "" {
		return fmt.Errorf("%w (%s): %w", kind, detail, err)
	}
	return fmt.Errorf("%w: %w", kind, err)
}

// Permanent reports whether waiting cannot fix the failure: a file that is
// not a database stays so. A wrong password, a missing database or an
// unreachable server may be fixed on the server's side while the node
// waits (a service may boot before its database, or before its login).
func Permanent(err error) bool { return errors.Is(err, ErrNotADatabase) }

func classify(err error, drivers []Driver) (kind error, detail string) {
	for _, d := range drivers {
		if kind := d.ConnectError(err); kind != nil {
			return kind, ""
		}
	}
	if isTLS(err) {
		return ErrTLS, ""
	}
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns):
		return ErrUnreachable, "host name " + dns.Name + " not found"
	case errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "actively refused"): // Windows: WSAECONNREFUSED
		return ErrUnreachable, "connection refused: nothing listens at that host and port"
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		return ErrUnreachable, "no route to the host"
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ErrUnreachable, "no answer in time: the host is down, or a firewall drops the connection"
	}
	return nil, ""
}

// isTLS reports a failed TLS handshake or certificate check. go-mssqldb
// and pgx keep the error's type most of the time; their messages say
// "tls:" or "TLS Handshake failed" when they do not.
func isTLS(err error) bool {
	var (
		ua  x509.UnknownAuthorityError
		he  x509.HostnameError
		ci  x509.CertificateInvalidError
		cv  *tls.CertificateVerificationError
		rh  tls.RecordHeaderError
		alt tls.AlertError
	)
	if errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) || errors.As(err, &cv) ||
		errors.As(err, &rh) || errors.As(err, &alt) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "tls: ") || strings.Contains(msg, "x509: ") || strings.Contains(msg, "TLS Handshake failed")
}
