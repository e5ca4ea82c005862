package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// A `submit --wait` whose job parks for a person says so at once, and a wait
// that runs out says the job is still there and how to follow it.
func TestSubmitWaitTellsWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	url, _ := startExecBus(t)

	code, _, errOut := run(t, "--nats", url, "--timeout", "2s", "submit", "--tool", "exec",
		"--input", `{"command":"uname -a"}`, "--session", "agent", "--wait")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "waiting for approval: ")
	require.Contains(t, errOut, "(approve with `toolq approve ")
	require.Contains(t, errOut, "is still "+string(contracts.StatusApprovalPending)+" after --timeout 2s")
	require.Contains(t, errOut, "toolq events --session agent --job ")
	require.NotContains(t, errOut, "context deadline exceeded")
	require.Equal(t, 1, strings.Count(errOut, "waiting for approval"))
}

// A submit for a tool no worker serves fails at once, naming the tools that
// are served, and prints no job id; --wait does not hang.
func TestSubmitUnservedToolFailsFast(t *testing.T) {
	t.Parallel()
	url := startBus(t)
	for _, args := range [][]string{
		{"--nats", url, "submit", "--tool", "nosuchtool"},
		{"--nats", url, "submit", "--tool", "nosuchtool", "--wait"},
	} {
		code, out, errOut := run(t, args...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
		require.Empty(t, out, "no job id for a job never enqueued")
		require.Contains(t, errOut, `invalid_input: no worker serves tool "nosuchtool"; served: `)
		require.Contains(t, errOut, "noop, sleep")
	}
}

// Cancelling a job that never existed says so, exits non-zero and writes
// no cancelled event; a job of the session is still cancelled.
func TestCancelUnknownJob(t *testing.T) {
	t.Parallel()
	url := startBus(t)
	code, out, errOut := run(t, "--nats", url, "cancel", "--session", "cli", "NOPE123")
	require.Equal(t, 1, code, errOut)
	require.NotContains(t, out, "cancelled")
	require.Contains(t, errOut, "no job NOPE123 in session cli: nothing was cancelled")

	code, out, errOut = run(t, "--nats", url, "submit", "--tool", "sleep", "--input", `{"ms":60000}`, "--session", "cli")
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)
	// Another session does not find it.
	code, _, errOut = run(t, "--nats", url, "cancel", "--session", "other", id)
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "no job "+id+" in session other")
	code, out, errOut = run(t, "--nats", url, "cancel", "--session", "cli", id)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "cancelled "+id)

	code, out, errOut = run(t, "--nats", url, "events", "--session", "cli")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, 1, strings.Count(out, "\n"), out)
	require.Contains(t, out, id)
	require.Contains(t, out, "cancelled")
	code, out, errOut = run(t, "--nats", url, "events", "--session", "other")
	require.Equal(t, 0, code, errOut)
	require.Empty(t, strings.TrimSpace(out))
}

// submit --from submits a JSON Lines file with progress and a summary;
// every job runs; a rerun of the finished file submits nothing (its
// progress file says all were acknowledged), and one whose progress file
// was lost submits nothing twice either (the derived ids are the same).
func TestSubmitFromFile(t *testing.T) {
	t.Parallel()
	url := startBus(t)
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	var b strings.Builder
	for i := range 50 {
		fmt.Fprintf(&b, "{\"input\":{\"n\":%d}}\n", i)
	}
	b.WriteString("\n{\"tool\":\"sleep\",\"input\":{\"ms\":1},\"id\":\"named\"}\n")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))

	code, out, errOut := run(t, "--nats", url, "--json", "submit", "--from", path, "--tool", "noop", "--session", "batch")
	require.Equal(t, 0, code, errOut)
	var sum map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &sum), out)
	require.InDelta(t, 51, sum["jobs"], 0)
	require.InDelta(t, 51, sum["submitted"], 0)
	require.Contains(t, errOut, "51/51 (100%)", "progress on stderr")

	// Every job ends: 50 noop and the named sleep.
	code, out, errOut = run(t, "--nats", url, "submit", "--tool", "noop", "--session", "batch", "--id", "after", "--wait")
	require.Equal(t, 0, code, errOut)
	require.Eventually(t, func() bool {
		_, out, _ = run(t, "--nats", url, "--json", "events", "--session", "batch")
		return strings.Count(out, `"status":"completed"`) == 52
	}, 20*time.Second, 100*time.Millisecond, out)
	require.Contains(t, out, `"job_id":"named"`)

	code, out, errOut = run(t, "--nats", url, "--json", "submit", "--from", path, "--tool", "noop", "--session", "batch")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &sum))
	require.InDelta(t, 51, sum["skipped"], 0, "the progress file says every line was acknowledged")
	require.InDelta(t, 0, sum["submitted"], 0)

	require.NoError(t, os.Remove(path+".progress"))
	code, out, errOut = run(t, "--nats", url, "--json", "submit", "--from", path, "--tool", "noop", "--session", "batch")
	require.Equal(t, 0, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &sum))
	require.InDelta(t, 0, sum["submitted"], 0)
	require.InDelta(t, 51, sum["duplicates"], 0, "the same lines give the same ids")

	// A line that is not a job fails the file before anything is sent.
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte("{\"input\":1}\n{\"tool\":\"noop\",\"inptu\":2}\n"), 0o600))
	code, _, errOut = run(t, "--nats", url, "submit", "--from", bad, "--tool", "noop", "--session", "bad")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "line 2 is not a job")
	code, _, errOut = run(t, "--nats", url, "submit", "--input", "{}")
	require.Equal(t, 2, code, "--tool is still required without --from: %s", errOut)
}

// `submit --priority` puts the job on its level's subject, where a worker
// runs it; an unknown level is refused before anything is sent.
func TestSubmitPriority(t *testing.T) {
	t.Parallel()
	url := startBus(t)
	for _, prio := range []string{"high", "low", "normal"} {
		code, out, errOut := run(t, "--nats", url, "submit", "--tool", "noop", "--input", `{"p":"`+prio+`"}`, "--priority", prio, "--wait")
		require.Equal(t, 0, code, "%s: %s", prio, errOut)
		var ev contracts.Event
		require.NoError(t, json.Unmarshal([]byte(out), &ev))
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
		require.JSONEq(t, `{"p":"`+prio+`"}`, string(ev.Data.Result))
	}
	code, out, errOut := run(t, "--nats", url, "submit", "--tool", "noop", "--priority", "urgent")
	require.Equal(t, 2, code, errOut)
	require.Empty(t, out)
	require.Contains(t, errOut, `invalid_input: priority "urgent" is not one of high, normal, low`)
}

// `submit --concurrency-key/--concurrency-limit` carries the limit on the
// job (the worker answers it); a half-given or out-of-range limit is
// refused before anything is sent.
func TestSubmitConcurrencyKey(t *testing.T) {
	t.Parallel()
	url := startBus(t)
	code, out, errOut := run(t, "--nats", url, "submit", "--tool", "noop", "--input", `1`, "--concurrency-key", "repo-1", "--concurrency-limit", "2", "--wait")
	require.Equal(t, 0, code, errOut)
	var ev contracts.Event
	require.NoError(t, json.Unmarshal([]byte(out), &ev))
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	for _, args := range [][]string{
		{"--concurrency-key", "repo-1"},
		{"--concurrency-limit", "2"},
		{"--concurrency-key", "repo-1", "--concurrency-limit", "10001"},
		{"--concurrency-key", "a.b", "--concurrency-limit", "1"},
	} {
		code, out, errOut := run(t, append([]string{"--nats", url, "submit", "--tool", "noop"}, args...)...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, "invalid_input: concurrency.", args)
	}
}
