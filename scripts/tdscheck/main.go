// Command tdscheck makes sure the SQL Server a DSN names answers a trivial
// query, for CI: a start script that prints a DSN has only seen the port
// open, which a half-initialised T-SQL server also does.
//
//	go run ./scripts/tdscheck "$SLOTPOLLER_TEST_SQLSERVER_DSN"
package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"time"

	_ "github.com/microsoft/go-mssqldb" // the "sqlserver" driver
)

func main() {
	if len(os.Args) != 2 || os.Args[1] == "" {
		fmt.Fprintln(os.Stderr, "usage: tdscheck SQLSERVER_DSN")
		os.Exit(2)
	}
	if err := check(os.Args[1], time.Minute); err != nil {
		fmt.Fprintln(os.Stderr, "tdscheck:", err)
		os.Exit(1)
	}
}

// check runs SELECT 1 until it answers 1 or within has passed: a server
// just started may still refuse logins for a moment.
func check(dsn string, within time.Duration) error {
	db, err := sql.Open("sqlserver", dsn)
	if err != nil {
		return fmt.Errorf("bad DSN: %w", err)
	}
	defer db.Close()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var one int
		err = db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
		cancel()
		if err == nil && one == 1 {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("SELECT 1 returned %d", one)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server does not answer SELECT 1 after %v: %w", within, err)
		}
		time.Sleep(time.Second)
	}
}
