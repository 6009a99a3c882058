package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/slotpoller/slotpoller/internal/store"
	"github.com/slotpoller/slotpoller/internal/store/open"
	"github.com/stretchr/testify/require"
)

// job search: by key or text, as a table or JSON; a text search that did
// not read the whole table says from which job on it read.
func TestJobSearch(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "farm.db")
	cfg := writeConfig(t, "database:\n  dsn: "+dbPath+"\n")
	code, _, errOut := cli(t, "schema", "migrate", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	ctx := context.Background()
	s, err := open.Store(ctx, "sqlite", dbPath)
	require.NoError(t, err)
	defer s.Close()
	old, err := s.JobInsert(ctx, store.NewJob{Endpoint: "/jobs/report", Method: "POST", MaxAttempts: 1, IdempotencyKey: "k1",
		UniqueKey: "report-7", Payload: []byte("needle"), Delay: time.Hour})
	require.NoError(t, err)
	_, err = s.JobInsert(ctx, store.NewJob{Endpoint: "/jobs/other", Method: "POST", MaxAttempts: 1, IdempotencyKey: "k2", Delay: time.Hour})
	require.NoError(t, err)

	code, out, errOut := cli(t, "job", "search", "report-7", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^ID +FOUND BY +STATE`, out)
	require.Regexp(t, `(?m)^`+strconv.FormatInt(old, 10)+` +unique_key +ready`, out)

	code, out, errOut = cli(t, "job", "search", "needle", "-json", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	var res struct {
		Hits []struct {
			Matched string `json:"matched"`
			Job     struct {
				ID int64 `json:"id"`
			} `json:"job"`
		} `json:"hits"`
		From int64 `json:"from"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Len(t, res.Hits, 1)
	require.Equal(t, "payload", res.Hits[0].Matched)
	require.Zero(t, res.From, "the whole table was read")

	code, out, errOut = cli(t, "job", "search", "needle", "-scan", "1", "-config", cfg)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "no job found")
	require.Contains(t, out, "the text was looked for in the newest 1 jobs")

	code, _, errOut = cli(t, "job", "search", "-config", cfg)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "give what to look for")
	code, _, errOut = cli(t, "job", "search", "x", "-limit", "101", "-config", cfg)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "-limit: limit 101 must be from 1 to 100")
}
