package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The CLI's operator actions are in the audit log under the OS user who
// ran them and the host; `audit` lists them newest first, filtered and
// paged, as text or JSON. A refused action is not recorded.
func TestCLIActionsAreAudited(t *testing.T) {
	dbPath := filepath.Join(t.TempDir(), "farm.db")
	cfg := writeConfig(t, "database:\n  dsn: "+dbPath+"\n")
	run := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := cli(t, append(args, "-config", cfg)...)
		require.Equal(t, want, code, "%v: %s%s", args, out, errOut)
		return out
	}
	run(0, "schema", "migrate")
	run(0, "queue", "pause", "-name", "reports")
	run(0, "queue", "resume", "-name", "reports")
	run(0, "schedule", "add", "-name", "nightly", "-cron", "0 2 * * *", "-endpoint", "/jobs/report")
	run(0, "schedule", "trigger", "-name", "nightly")
	run(1, "schedule", "pause", "-name", "nope") // refused: no such schedule
	run(0, "task", "add", "-name", "feed", "-endpoint", "/tasks/feed", "-every", "5s")

	type entry struct{ Actor, Origin, Action, Target, Detail, At string }
	list := func(args ...string) (es []entry, next string) {
		t.Helper()
		var out struct {
			Entries    []entry `json:"entries"`
			NextCursor string  `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal([]byte(run(0, append([]string{"audit", "-json"}, args...)...)), &out))
		return out.Entries, out.NextCursor
	}
	all, next := list()
	require.Empty(t, next)
	var actions []string
	for _, e := range all {
		actions = append(actions, e.Action+" "+e.Target)
		require.Equal(t, cliActor(), e.Actor)
		require.Equal(t, cliOrigin(), e.Origin)
		require.NotEmpty(t, e.At)
	}
	require.Equal(t, []string{"task.add feed", "schedule.trigger nightly", "schedule.add nightly", "queue.resume reports", "queue.pause reports"}, actions,
		"newest first; the refused pause is not there")
	require.Contains(t, all[2].Detail, "cron 0 2 * * *: POST /jobs/report")

	sched, _ := list("-action", "schedule")
	require.Len(t, sched, 2)
	page, next := list("-limit", "2")
	require.Len(t, page, 2)
	require.NotEmpty(t, next)
	rest, _ := list("-limit", "2", "-cursor", next)
	require.Equal(t, "schedule.add", rest[0].Action)

	text := run(0, "audit", "-action", "queue.pause")
	require.Regexp(t, `(?m)^AT +ACTOR +ORIGIN +ACTION +TARGET +DETAIL$`, text)
	require.Regexp(t, `queue\.pause +reports`, text)
	require.NotContains(t, text, "queue.resume")
}
