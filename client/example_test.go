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
	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/schema"
)

// Enqueue a job in the application's own transaction: it exists, and runs,
// only if the order is committed.
func ExampleClient_EnqueueTx() {
	db := exampleDB() // sql.Open("pgx", dsn), sql.Open("sqlserver", dsn) ...
	ctx := context.Background()
	c, err := client.New(db, "sqlite")
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
	c, err := client.New(db, "sqlite")
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

// exampleDB is a migrated SQLite database in a temporary folder.
func exampleDB() *sql.DB {
	dir, err := os.MkdirTemp("", "slotpoller-example")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	s, err := store.Open(ctx, "sqlite", filepath.Join(dir, "farm.db"))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := schema.Migrate(ctx, s); err != nil {
		log.Fatal(err)
	}
	return s.DB()
}
