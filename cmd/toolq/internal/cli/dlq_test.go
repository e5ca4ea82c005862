package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/cmd/toolq/internal/operator"
	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/worker"
)

// flaky is a tool that fails (retryably, so an exhausted job is dead
// lettered) while broken, and otherwise echoes its input; while hold is
// set it waits for it to be closed first. It counts its runs per job id.
type flaky struct {
	broken atomic.Bool
	mu     sync.Mutex
	hold   chan struct{}
	runs   map[string]int
}

func newFlaky() *flaky {
	f := &flaky{runs: map[string]int{}}
	f.broken.Store(true)
	return f
}

func (f *flaky) Handle(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
	f.mu.Lock()
	f.runs[job.ID]++
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.broken.Load() {
		return nil, errors.New("flaky: the backend is down")
	}
	return job.Input, nil
}

func (f *flaky) holdJobs() (release func()) {
	ch := make(chan struct{})
	f.mu.Lock()
	f.hold = ch
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		f.hold = nil
		f.mu.Unlock()
		close(ch)
	}
}

func (f *flaky) runsOf(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[id]
}

// registerFlaky adds the tools flaky and flaky2 (one attempt each, one job
// at a time) to w.
func registerFlaky(t *testing.T, w *worker.Worker, f *flaky) {
	t.Helper()
	for _, name := range []string{"flaky", "flaky2"} {
		require.NoError(t, w.Register(name, f, &worker.ToolConfig{
			Concurrency: 1, MaxAckPending: 1, Retry: worker.RetryPolicy{MaxAttempts: 1},
		}))
	}
}

type dlqBundle struct {
	url   string
	nc    *nats.Conn
	js    jetstream.JetStream
	flaky *flaky
}

// startDLQBus is an embedded server with a worker serving the builtins and
// the flaky tools.
func startDLQBus(t *testing.T) *dlqBundle {
	t.Helper()
	srv := testutil.StartJetStream(t)
	b := &dlqBundle{url: srv.ClientURL(), nc: srv.Connect(t), flaky: newFlaky()}
	b.js = testutil.JetStream(t, b.nc)
	w, err := worker.New(srv.Connect(t), &worker.Config{Logger: slog.New(slog.DiscardHandler), Builtins: true})
	require.NoError(t, err)
	registerFlaky(t, w, b.flaky)
	require.NoError(t, w.Start(testutil.Context(t, 10*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return b
}

// failToDLQ submits a job of tool that the broken flaky tool fails once,
// which dead-letters it (one attempt). The DLQ record is written before
// the failed event that ends --wait.
func failToDLQ(t *testing.T, url string, extra []string, tool, session, id string) {
	t.Helper()
	args := append(append([]string{"--nats", url}, extra...), "submit", "--tool", tool, "--session", session, "--id", id, "--input", `{"id":"`+id+`"}`, "--wait")
	code, out, errOut := run(t, args...)
	require.Equal(t, 1, code, "%s: %s", out, errOut)
	require.Contains(t, out, `"failed"`)
}

// dlqRows is dlq ls --json with args.
func dlqRows(t *testing.T, url string, args ...string) []operator.Row {
	t.Helper()
	code, out, errOut := run(t, append([]string{"--nats", url, "--json", "dlq", "ls"}, args...)...)
	require.Equal(t, 0, code, errOut)
	var rows []operator.Row
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var r operator.Row
		require.NoError(t, json.Unmarshal([]byte(l), &r), l)
		rows = append(rows, r)
	}
	return rows
}

func seqOf(t *testing.T, rows []operator.Row, jobID string) uint64 {
	t.Helper()
	for _, r := range rows {
		if r.JobID == jobID {
			return r.Seq
		}
	}
	t.Fatalf("no dead letter of job %s in %+v", jobID, rows)
	return 0
}

// awaitEvent polls the session's events (through the CLI) until job id
// has one with status, and returns it.
func awaitEvent(t *testing.T, url string, extra []string, session, id string, status contracts.Status) *contracts.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, out, errOut := run(t, append(append([]string{"--nats", url}, extra...), "--json", "events", "--session", session, "--job", id)...)
		require.Equal(t, 0, code, errOut)
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var ev contracts.Event
			if json.Unmarshal([]byte(l), &ev) == nil && ev.Data.Status == status {
				return &ev
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s has no %s event: %s", id, status, out)
		}
		time.Sleep(50 * time.Millisecond) // polling the bus, through the command under test
	}
}

// TestDLQLsShowRequeue: real dead letters (a worker exhausts their one
// attempt) are listed with filters and limits, shown whole, and requeued:
// the job runs again, to completion, and its dead letter is gone.
func TestDLQLsShowRequeue(t *testing.T) {
	t.Parallel()
	b := startDLQBus(t)
	failToDLQ(t, b.url, nil, "flaky", "sa", "job-a1")
	failToDLQ(t, b.url, nil, "flaky", "sa", "job-a2")
	failToDLQ(t, b.url, nil, "flaky2", "sb", "job-b1")

	rows := dlqRows(t, b.url)
	require.Len(t, rows, 3)
	require.Equal(t, "job-a1", rows[0].JobID, "oldest first")
	for _, r := range rows {
		require.Equal(t, 1, r.Attempts)
		require.NotNil(t, r.Error)
		require.Equal(t, contracts.CodeInternalError, r.Error.Code)
		require.Contains(t, r.Error.Message, "the backend is down")
		require.Empty(t, r.Tenant)
	}
	require.Len(t, dlqRows(t, b.url, "--session", "sa"), 2)
	require.Len(t, dlqRows(t, b.url, "--tool", "flaky2"), 1)
	require.Len(t, dlqRows(t, b.url, "--limit", "1"), 1)
	require.Empty(t, dlqRows(t, b.url, "--session", "nobody"))

	code, out, errOut := run(t, "--nats", b.url, "dlq", "ls", "--tool", "flaky")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "SEQ")
	require.Contains(t, out, "job-a1")
	require.Contains(t, out, "internal_error: flaky: the backend is down")
	require.NotContains(t, out, "job-b1")

	// show, by job id and by sequence: the job as received and the error.
	seqA1 := seqOf(t, rows, "job-a1")
	code, out, errOut = run(t, "--nats", b.url, "--json", "dlq", "show", "job-a1")
	require.Equal(t, 0, code, errOut)
	var shown struct {
		Seq        uint64               `json:"seq"`
		DeadLetter contracts.DeadLetter `json:"deadLetter"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &shown))
	require.Equal(t, seqA1, shown.Seq)
	job, err := contracts.DecodeJob(shown.DeadLetter.Job)
	require.NoError(t, err)
	require.Equal(t, "job-a1", job.ID)
	require.JSONEq(t, `{"id":"job-a1"}`, string(job.Input))
	require.Equal(t, contracts.CodeInternalError, shown.DeadLetter.Error.Code)
	code, out, errOut = run(t, "--nats", b.url, "dlq", "show", strconv.FormatUint(seqA1, 10))
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^job:\s+job-a1$`, out)
	require.Contains(t, out, "the backend is down")
	require.Contains(t, out, `"input": {`)
	code, _, errOut = run(t, "--nats", b.url, "--json", "dlq", "show", "no-such-job")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "invalid_input")

	// requeue: the job runs again from its first attempt and completes.
	b.flaky.broken.Store(false)
	code, out, errOut = run(t, "--nats", b.url, "dlq", "requeue", "job-a1")
	require.Equal(t, 0, code, errOut)
	newID := fmt.Sprintf("job-a1_rq%d", seqA1)
	require.Contains(t, out, "as "+newID+" on toolq.jobs.~s1.flaky", "on the session's lane (sa's is 1)")
	ev := awaitEvent(t, b.url, nil, "sa", newID, contracts.StatusCompleted)
	require.Equal(t, 1, ev.Data.Attempt)
	require.JSONEq(t, `{"id":"job-a1"}`, string(ev.Data.Result))
	require.Equal(t, "job-a1", ev.Data.Meta[operator.MetaRequeuedFrom])
	require.Equal(t, 1, b.flaky.runsOf(newID))
	rows = dlqRows(t, b.url)
	require.Len(t, rows, 2)
	require.NotContains(t, []string{rows[0].JobID, rows[1].JobID}, "job-a1")

	// --all with a filter requeues only what it selects.
	code, out, errOut = run(t, "--nats", b.url, "--json", "dlq", "requeue", "--all", "--tool", "flaky2")
	require.Equal(t, 0, code, errOut)
	var r operator.Requeued
	require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(out)), &r))
	require.Equal(t, "job-b1", r.JobID)
	awaitEvent(t, b.url, nil, "sb", r.RequeuedAs, contracts.StatusCompleted)
	rows = dlqRows(t, b.url)
	require.Len(t, rows, 1)
	require.Equal(t, "job-a2", rows[0].JobID)

	// Neither a dead letter nor --all, or both: a bad command line.
	for _, args := range [][]string{{"dlq", "requeue"}, {"dlq", "requeue", "1", "--all"}} {
		code, _, errOut = run(t, append([]string{"--nats", b.url}, args...)...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
	}
}

// TestDLQRequeueRerunEnqueuesOnce: requeue that died after its publish and
// before its delete is run again. Within the duplicate window the server
// drops the second publish; once the job has events, requeue does not
// publish at all. Either way the tool runs once and the dead letter goes.
func TestDLQRequeueRerunEnqueuesOnce(t *testing.T) {
	t.Parallel()
	b := startDLQBus(t)
	failToDLQ(t, b.url, nil, "flaky", "s", "held")
	failToDLQ(t, b.url, nil, "flaky", "s", "done")
	rows := dlqRows(t, b.url)
	b.flaky.broken.Store(false)
	ctx := testutil.Context(t, 10*time.Second)

	// crashed publishes the job as requeue does, leaving the dead letter:
	// a requeue that died between the two.
	crashed := func(seq uint64) string {
		raw, err := b.js.Stream(ctx, contracts.Subjects{}.DLQStream())
		require.NoError(t, err)
		msg, err := raw.GetMsg(ctx, seq)
		require.NoError(t, err)
		d := operator.DecodeDeadLetter(contracts.Subjects{}, seq, msg.Subject, msg.Time, msg.Data)
		job, err := operator.RequeueJob(d)
		require.NoError(t, err)
		data, err := json.Marshal(job)
		require.NoError(t, err)
		ack, err := b.js.Publish(ctx, "toolq.jobs.flaky", data, jetstream.WithMsgID(job.ID))
		require.NoError(t, err)
		require.False(t, ack.Duplicate)
		return job.ID
	}

	// Within the window, the job still running (no event yet).
	release := b.flaky.holdJobs()
	heldSeq := seqOf(t, rows, "held")
	heldID := crashed(heldSeq)
	require.Eventually(t, func() bool { return b.flaky.runsOf(heldID) == 1 }, 10*time.Second, 10*time.Millisecond)
	code, out, errOut := run(t, "--nats", b.url, "--json", "dlq", "requeue", strconv.FormatUint(heldSeq, 10))
	require.Equal(t, 0, code, errOut)
	var r operator.Requeued
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Equal(t, heldID, r.RequeuedAs)
	require.True(t, r.Already, "the server took the second publish for a duplicate")
	release()
	awaitEvent(t, b.url, nil, "s", heldID, contracts.StatusCompleted)

	// The job already ended: requeue finds its events and publishes nothing.
	doneSeq := seqOf(t, rows, "done")
	doneID := crashed(doneSeq)
	awaitEvent(t, b.url, nil, "s", doneID, contracts.StatusCompleted)
	code, out, errOut = run(t, "--nats", b.url, "dlq", "requeue", "done")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "already on the bus")

	require.Empty(t, dlqRows(t, b.url), "both dead letters deleted")
	// Nothing more is queued, and each ran once.
	code, out, errOut = run(t, "--nats", b.url, "--json", "jobs", "ls", "--tool", "flaky")
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, out, `"kind":"job"`)
	require.Equal(t, 1, b.flaky.runsOf(heldID))
	require.Equal(t, 1, b.flaky.runsOf(doneID))
}

// TestDLQPurge: purge asks first (and refuses without a terminal or
// --yes), deletes only what its filters select, and --all the rest.
func TestDLQPurge(t *testing.T) {
	t.Parallel()
	b := startDLQBus(t)
	failToDLQ(t, b.url, nil, "flaky", "sa", "p1")
	failToDLQ(t, b.url, nil, "flaky2", "sa", "p2")
	failToDLQ(t, b.url, nil, "flaky", "sb", "p3")
	failToDLQ(t, b.url, nil, "flaky", "sc", "p4")

	code, _, errOut := run(t, "--nats", b.url, "dlq", "purge")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--all")
	code, _, errOut = run(t, "--nats", b.url, "dlq", "purge", "--session", "sa")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "pass --yes")
	require.Len(t, dlqRows(t, b.url), 4, "nothing deleted without a confirmation")
	code, _, errOut = runTTY(t, "n\n", "--nats", b.url, "dlq", "purge", "--session", "sa")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "Delete 2 dead letters")
	require.Contains(t, errOut, "not confirmed")
	require.Len(t, dlqRows(t, b.url), 4)

	// Session sa and tool flaky: p1 only.
	code, out, errOut := run(t, "--nats", b.url, "dlq", "purge", "--session", "sa", "--tool", "flaky", "--yes")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "purged 1 dead letters")
	code, out, errOut = runTTY(t, "y\n", "--nats", b.url, "dlq", "purge", "p3")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "purged 1 dead letters")
	rows := dlqRows(t, b.url)
	require.Len(t, rows, 2)
	require.Equal(t, "p2", rows[0].JobID)
	require.Equal(t, "p4", rows[1].JobID)

	code, out, errOut = run(t, "--nats", b.url, "--json", "dlq", "purge", "--all", "--yes")
	require.Equal(t, 0, code, errOut)
	require.EqualValues(t, 2, requireJSON(t, out)["purged"])
	require.Empty(t, dlqRows(t, b.url))
	code, out, errOut = run(t, "--nats", b.url, "dlq", "purge", "--all", "--yes")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "no dead letters to purge")
}

// TestDLQRequeueRefusesWhatIsNoJob: a message that was no readable job is
// dead-lettered without a job id; requeue refuses it and keeps it, alone
// or among others with --all (which requeues the rest), and purge removes
// it by its sequence.
func TestDLQRequeueRefusesWhatIsNoJob(t *testing.T) {
	t.Parallel()
	b := startDLQBus(t)
	ctx := testutil.Context(t, 10*time.Second)
	_, err := b.js.Publish(ctx, "toolq.jobs.flaky", []byte(`{"not":"a job"}`), jetstream.WithMsgID("junk"))
	require.NoError(t, err)
	var rows []operator.Row
	require.Eventually(t, func() bool { rows = dlqRows(t, b.url); return len(rows) == 1 }, 10*time.Second, 20*time.Millisecond)
	junk := rows[0]
	require.Empty(t, junk.JobID)
	require.Equal(t, contracts.CodeInvalidInput, junk.Error.Code)
	failToDLQ(t, b.url, nil, "flaky", "s", "good")
	b.flaky.broken.Store(false)

	seq := strconv.FormatUint(junk.Seq, 10)
	code, _, errOut := run(t, "--nats", b.url, "dlq", "requeue", seq)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "no readable job")
	code, out, errOut := run(t, "--nats", b.url, "dlq", "requeue", "--all")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, out, "job good as good_rq")
	require.Contains(t, errOut, "1 dead letters not requeued and kept (seq "+seq+"); 1 requeued")
	rows = dlqRows(t, b.url)
	require.Len(t, rows, 1)
	require.Equal(t, junk.Seq, rows[0].Seq)

	code, out, errOut = run(t, "--nats", b.url, "dlq", "purge", seq, "--yes")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "purged 1")
	require.Empty(t, dlqRows(t, b.url))
}
