package client_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/slotpoller/slotpoller/client"
	"github.com/slotpoller/slotpoller/driver/postgres"
	"github.com/slotpoller/slotpoller/driver/sqlite"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/slotpoller/slotpoller/schema"
)

// The application opens its database as it always does, and gives
// client.New the Driver of that database's package: here PostgreSQL, with
// pgx's database/sql driver "pgx" (which driver/postgres imports). Only
// pgx is compiled in; sqlserver.Driver() and sqlite.Driver() are the
// others'.
func ExampleNew() {
	db, err := sql.Open("pgx", os.Getenv("FARM_DSN")) // postgres://app@db/farm
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	c, err := client.New(db, postgres.Driver(), client.WithActor("billing"))
	if err != nil {
		log.Fatal(err)
	}
	id, err := c.Enqueue(context.Background(), client.Job{Endpoint: "/jobs/nightly-report", Delay: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("enqueued job", id)
}

// Enqueue a job in the application's own transaction: it exists, and runs,
// only if the order is committed.
func ExampleClient_EnqueueTx() {
	db := exampleDB() // the application's own database: sql.Open("sqlite", path)
	ctx := context.Background()
	c, err := client.New(db, sqlite.Driver())
	if err != nil {
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	// ... the application's own writes in tx: INSERT INTO orders ...
	id, err := c.EnqueueTx(ctx, tx, client.Job{
		Endpoint:  "/jobs/send-invoice",
		Payload:   []byte(`{"order":42}`),
		UniqueKey: "invoice-42",
	})
	var dup *client.DuplicateError
	if errors.As(err, &dup) {
		log.Fatalf("order 42's invoice is already job %d", dup.ID)
	}
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	j, err := c.Get(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(j.State, j.Endpoint, j.UniqueKey)
	// Output: ready /jobs/send-invoice invoice-42
}

// Find the jobs that died in the last day and run them again.
func ExampleClient_RetryMatching() {
	db := exampleDB()
	ctx := context.Background()
	c, err := client.New(db, sqlite.Driver())
	if err != nil {
		log.Fatal(err)
	}
	page, err := c.List(ctx, client.Filter{State: client.StateDead, Since: 24 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	for _, j := range page.Jobs {
		fmt.Println(j.ID, j.Endpoint, j.LastStatus, j.LastError)
	}
	n, err := c.RetryMatching(ctx, client.Filter{State: client.StateDead, Since: 24 * time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("retried", n)
	// Output: retried 0
}

// exampleDB opens, as an application would, a SQLite farm database that a
// node migrated (slotpoller schema migrate) in a temporary folder.
func exampleDB() *sql.DB {
	dir, err := os.MkdirTemp("", "slotpoller-example")
	if err != nil {
		log.Fatal(err)
	}
	path := filepath.Join(dir, "farm.db")
	ctx := context.Background()
	s, err := open.Store(ctx, "sqlite", path)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := schema.Migrate(ctx, s); err != nil {
		log.Fatal(err)
	}
	if err := s.Close(); err != nil {
		log.Fatal(err)
	}
	db, err := sql.Open("sqlite", path) // modernc.org/sqlite, which driver/sqlite imports
	if err != nil {
		log.Fatal(err)
	}
	return db
}
