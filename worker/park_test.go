package worker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

func TestParkThenEmitContinuation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("ask", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			return json.RawMessage(`{"approvalId":"a1"}`), worker.Park(contracts.StatusApprovalPending, 1)
		}), nil))
	})
	job := b.submit(t, "ask", `{}`, nil)
	ctx := testutil.Context(t, 10*time.Second)
	ev, err := b.prod.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
	require.NoError(t, err)
	require.Equal(t, contracts.StatusApprovalPending, ev.Data.Status)
	require.JSONEq(t, `{"approvalId":"a1"}`, string(ev.Data.Result))
	requireQueueEmpty(t, b) // the step is over: acknowledged

	// Later, the continuation writes the job's next events.
	ref := &contracts.Job{ID: job.ID, Session: job.Session, Tool: job.Tool}
	require.NoError(t, w.Emit(ctx, ref, contracts.StatusApproved, 1, nil, nil))
	require.NoError(t, w.Emit(ctx, ref, contracts.StatusCompleted, 1, json.RawMessage(`{"exitCode":0}`), nil))
	final := b.await(t, job)
	require.Equal(t, contracts.StatusCompleted, final.Data.Status)
	require.ErrorIs(t, w.Emit(ctx, ref, contracts.StatusFailed, 1, nil, nil), worker.ErrJobEnded)

	var statuses []contracts.Status
	for _, e := range b.allEvents(t, job.Session) {
		statuses = append(statuses, e.Data.Status)
	}
	require.Equal(t, []contracts.Status{contracts.StatusApprovalPending, contracts.StatusApproved, contracts.StatusCompleted}, statuses)
	require.ErrorIs(t, w.Emit(ctx, &contracts.Job{ID: "x y", Session: "s1"}, contracts.StatusFailed, 1, nil, nil), contracts.ErrInvalidInput)
}

// The worker that parked a job writes its next event without reading the
// last one back (it knows its sequence); when another writer moved the job
// on meanwhile, the guess fails its expected sequence and the job still
// has one terminal event.
func TestEmitAfterParkSkipsTheReadButNotTheCheck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("ask", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			return json.RawMessage(`{}`), worker.Park(contracts.StatusApprovalPending, 1)
		}), nil))
	})
	ctx := testutil.Context(t, 10*time.Second)
	park := func() *contracts.Job {
		job := b.submit(t, "ask", `{}`, nil) //nolint:contextcheck // the bundle's helpers make their own contexts
		ev, err := b.prod.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
		require.NoError(t, err)
		require.Equal(t, contracts.StatusApprovalPending, ev.Data.Status)
		return job
	}
	// Count the reads of a last event from here on.
	// The counter's callback runs behind the connection's reader: a read
	// made before the count starts (the requester's Await) may reach it
	// late. A marker sent down the same subscription tells when every
	// earlier read has been counted.
	var reads atomic.Int32
	marked := make(chan struct{}, 1)
	const marker = "$JS.API.DIRECT.GET.TOOLQ_EVENTS.test-marker"
	snc := b.srv.Connect(t)
	_, err := snc.Subscribe("$JS.API.DIRECT.GET.TOOLQ_EVENTS.>", func(m *nats.Msg) {
		if m.Subject == marker {
			marked <- struct{}{}
			return
		}
		reads.Add(1)
	})
	require.NoError(t, err)
	require.NoError(t, snc.Flush())
	drain := func() {
		t.Helper()
		require.NoError(t, snc.Publish(marker, nil))
		select {
		case <-marked:
		case <-ctx.Done():
			t.Fatal("the marker never came back")
		}
	}

	job := park()
	ref := &contracts.Job{ID: job.ID, Session: job.Session, Tool: job.Tool}
	// The requester can see the parked event before the worker has noted
	// its sequence (it notes it once the store answers).
	require.Eventually(t, func() bool { return worker.NotedLastEvent(w, ref) }, 5*time.Second, time.Millisecond)
	drain()
	reads.Store(0)
	require.NoError(t, w.Emit(ctx, ref, contracts.StatusCompleted, 1, nil, nil))
	drain() // the worker's requests were routed before its answers
	require.Zero(t, reads.Load(), "the parking worker read the last event back")
	require.Equal(t, contracts.StatusCompleted, b.await(t, job).Data.Status)

	// Another writer ends the job after it parked: the worker's guess is
	// out of date, and its Emit finds the job ended.
	job = park()
	require.NoError(t, b.prod.Cancel(ctx, job.Session, job.ID))
	ref = &contracts.Job{ID: job.ID, Session: job.Session, Tool: job.Tool}
	require.ErrorIs(t, w.Emit(ctx, ref, contracts.StatusCompleted, 1, nil, nil), worker.ErrJobEnded)
	var statuses []contracts.Status
	for _, e := range b.allEvents(t, job.Session) {
		if e.Data.JobID == job.ID {
			statuses = append(statuses, e.Data.Status)
		}
	}
	require.Equal(t, []contracts.Status{contracts.StatusApprovalPending, contracts.StatusCancelled}, statuses)
}

// A handler that parks a job with a result that is not JSON has a bug: the
// job fails at once, not after a round of retries.
func TestParkWithInvalidResultFailsPermanently(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("ask", worker.HandlerFunc(func(_ context.Context, j *contracts.Job) (json.RawMessage, error) {
			runs.Add(1)
			if string(j.Input) == `"status"` {
				return json.RawMessage(`{}`), worker.Park(contracts.StatusCompleted, 1)
			}
			return json.RawMessage(`{not json`), worker.Park(contracts.StatusApprovalPending, 1)
		}), &worker.ToolConfig{Retry: worker.RetryPolicy{MaxAttempts: 3, InitialInterval: 10 * time.Millisecond, MaxInterval: 20 * time.Millisecond}}))
	})
	ev := b.await(t, b.submit(t, "ask", `{}`, nil))
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeInternalError, ev.Data.Error.Code)
	require.False(t, ev.Data.Error.Retryable)
	require.Contains(t, ev.Data.Error.Message, "park result is invalid")
	require.Equal(t, 1, ev.Data.Attempt)
	require.Equal(t, int32(1), runs.Load(), "never retried")

	// A park with a status that does not park is the same bug.
	ev = b.await(t, b.submit(t, "ask", `"status"`, nil))
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Contains(t, ev.Data.Error.Message, "does not park")
	require.Equal(t, 1, ev.Data.Attempt)
	requireQueueEmpty(t, b)
}

// TestParkedJobHoldsNoConcurrencySlot: a job that parks (a code-mode run
// suspended, an exec waiting for approval) ends its step, and with it its
// lease of the concurrency key: with a limit of 1, a second job of the key
// runs while the first is parked, and no lease is left once both ended.
func TestParkedJobHoldsNoConcurrencySlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ran atomic.Int32
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("ask", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			return json.RawMessage(`{}`), worker.Park(contracts.StatusApprovalPending, 1)
		}), nil))
		require.NoError(t, w.Register("work", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			ran.Add(1)
			return json.RawMessage(`{}`), nil
		}), nil))
	})
	ctx := testutil.Context(t, 20*time.Second)
	key := &contracts.ConcurrencyLimit{Key: "repo-a", Limit: 1}
	parked := b.submit(t, "ask", `{}`, &producer.SubmitOpts{Concurrency: key})
	ev, err := b.prod.Await(ctx, parked.Session, parked.ID, &producer.AwaitOpts{Parked: true})
	require.NoError(t, err)
	require.Equal(t, contracts.StatusApprovalPending, ev.Data.Status)

	// The parked job holds no slot: the next job of the key runs now,
	// without a throttled event.
	next := b.submit(t, "work", `{}`, &producer.SubmitOpts{Concurrency: key})
	ev, err = b.prod.Await(ctx, next.Session, next.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	require.Equal(t, int32(1), ran.Load())
	for _, e := range b.allEvents(t, next.Session) {
		if e.Data.JobID == next.ID {
			require.NotEqual(t, contracts.StatusThrottled, e.Data.Status, "the parked job kept the key's only slot")
		}
	}
	kv, err := b.js.KeyValue(ctx, contracts.Subjects{}.ConcurrencyBucket())
	require.NoError(t, err)
	keys, err := kv.ListKeys(ctx)
	require.NoError(t, err)
	var left []string
	for k := range keys.Keys() {
		left = append(left, k)
	}
	require.Empty(t, left, "leases left")
}
