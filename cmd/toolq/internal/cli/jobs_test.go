package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/cmd/toolq/internal/operator"
	"github.com/toolq/toolq/contracts"
)

// jobsLs is jobs ls --json with args: the queue rows and the job rows.
func jobsLs(t *testing.T, url string, extra []string, args ...string) (qs []operator.QueueRow, jobs []operator.QueuedJob) {
	t.Helper()
	code, out, errOut := run(t, append(append(append([]string{"--nats", url}, extra...), "--json", "jobs", "ls"), args...)...)
	require.Equal(t, 0, code, errOut)
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var kind struct {
			Kind string `json:"kind"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &kind), l)
		switch kind.Kind {
		case "queue":
			var q operator.QueueRow
			require.NoError(t, json.Unmarshal([]byte(l), &q))
			qs = append(qs, q)
		case "job":
			var j operator.QueuedJob
			require.NoError(t, json.Unmarshal([]byte(l), &j))
			jobs = append(jobs, j)
		default:
			t.Fatalf("line of no kind: %s", l)
		}
	}
	return qs, jobs
}

func queueOf(qs []operator.QueueRow, tenant, tool string) *operator.QueueRow {
	for i := range qs {
		if qs[i].Tenant == tenant && qs[i].Tool == tool {
			return &qs[i]
		}
	}
	return nil
}

// TestJobsLs: one job running and two queued behind it show as such, per
// tool and with their ids; listing them takes nothing off the queue (all
// three complete afterwards, each run once).
func TestJobsLs(t *testing.T) {
	t.Parallel()
	b := startDLQBus(t)
	b.flaky.broken.Store(false)
	release := b.flaky.holdJobs()
	ids := []string{"q1", "q2", "q3"}
	for _, id := range ids {
		code, _, errOut := run(t, "--nats", b.url, "submit", "--tool", "flaky", "--session", "jl", "--id", id)
		require.Equal(t, 0, code, errOut)
		if id == "q1" {
			require.Eventually(t, func() bool { return b.flaky.runsOf("q1") == 1 }, 10*time.Second, 10*time.Millisecond)
		}
	}
	// One more at low priority: its level's queue counts in the tool's row.
	code, _, errOut := run(t, "--nats", b.url, "submit", "--tool", "flaky", "--session", "jl", "--id", "q4", "--priority", "low")
	require.Equal(t, 0, code, errOut)
	ids = append(ids, "q4")

	qs, jobs := jobsLs(t, b.url, nil)
	require.Empty(t, jobs, "no job rows without --tool")
	q := queueOf(qs, "", "flaky")
	require.NotNil(t, q, "%+v", qs)
	q.Waiting = 0 // the worker's pull requests, if it has some out
	// The low job is queued, or already held by its level's loop waiting
	// for a slot (taken, so ack-pending).
	require.Equal(t, 4, int(q.Pending)+q.AckPending, "%+v", *q) //nolint:gosec // G115: a count of four
	q.Pending, q.AckPending = 0, 0
	require.Equal(t, operator.QueueRow{Kind: "queue", Tool: "flaky", Stream: "TOOLQ_JOBS", Messages: 4, Consumer: true}, *q)
	noop := queueOf(qs, "", "noop")
	require.NotNil(t, noop, "a served tool with an empty queue is listed")
	require.True(t, noop.Consumer)
	require.Zero(t, noop.Messages)

	qs, jobs = jobsLs(t, b.url, nil, "--tool", "flaky")
	require.Len(t, qs, 1)
	require.Len(t, jobs, 4)
	for i, j := range jobs {
		require.Equal(t, ids[i], j.JobID)
		require.Equal(t, "jl", j.Session)
		require.GreaterOrEqual(t, j.AgeMs, int64(0))
	}
	require.Equal(t, "delivered", jobs[0].State)
	require.Equal(t, "queued", jobs[1].State)
	require.Equal(t, "queued", jobs[2].State)
	require.Empty(t, jobs[1].Priority)
	require.Equal(t, "low", jobs[3].Priority)
	_, jobs = jobsLs(t, b.url, nil, "--tool", "flaky", "--limit", "2")
	require.Len(t, jobs, 2)

	code, out, errOut := run(t, "--nats", b.url, "jobs", "ls", "--tool", "flaky")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "ACK PENDING")
	require.Regexp(t, `(?m)^-\s+flaky\s+4\s+\d\s+\d\s+0\s+\d+$`, out)
	require.Regexp(t, `(?m)^\d+\s+-\s+q2\s+jl\s+-\s+\S+\s+queued$`, out)
	require.Regexp(t, `(?m)^\d+\s+-\s+q4\s+jl\s+low\s+\S+\s+(queued|delivered)$`, out)

	// Read-only: every job still runs, once.
	release()
	for _, id := range ids {
		awaitEvent(t, b.url, nil, "jl", id, contracts.StatusCompleted)
		require.Equal(t, 1, b.flaky.runsOf(id))
	}
	qs, _ = jobsLs(t, b.url, nil, "--tool", "flaky")
	require.Zero(t, queueOf(qs, "", "flaky").Messages)

	code, _, errOut = run(t, "--nats", b.url, "jobs", "ls", "--tenant", "NOPE")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "no jobs stream for tenant NOPE")
}

// TestReadmeOperatorLines: the README's dlq and jobs lines name commands
// and flags that exist.
func TestReadmeOperatorLines(t *testing.T) {
	t.Parallel()
	n := 0
	for _, line := range strings.Split(string(readFile(t, "README.md")), "\n") {
		if !strings.HasPrefix(line, "bin/toolq dlq ") && !strings.HasPrefix(line, "bin/toolq jobs ") {
			continue
		}
		n++
		line, _, _ = strings.Cut(line, "#")
		args := strings.Fields(line)[1:]
		root, _ := newRoot(nil, nil)
		cmd, rest, err := root.Find(args)
		require.NoError(t, err, line)
		require.NoError(t, cmd.ParseFlags(rest), line)
		require.NoError(t, cmd.ValidateArgs(cmd.Flags().Args()), line)
	}
	require.GreaterOrEqual(t, n, 7)
}
