package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

func TestCancelQueuedJobNeverStarts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A worker without the tool creates the streams; nobody consumes "later"
	// yet, so the job is submitted without the served check.
	b.startWorker(t, withBuiltins, nil)
	unchecked, err := producer.New(b.nc, &producer.Config{Session: "s1", Logger: quiet, SubmitUnserved: true})
	require.NoError(t, err)
	job, err := unchecked.Submit(testutil.Context(t, 5*time.Second), "later", json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	require.NoError(t, b.prod.Cancel(testutil.Context(t, 5*time.Second), job.Session, job.ID))

	var runs atomic.Int32
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("later", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			runs.Add(1)
			return nil, nil
		}), nil))
	})
	ev := b.await(t, job)
	require.Equal(t, contracts.StatusCancelled, ev.Data.Status)
	requireQueueEmpty(t, b)
	// Nothing after the cancel: one event, and the handler never ran.
	require.Len(t, b.allEvents(t, job.Session), 1)
	require.Equal(t, int32(0), runs.Load())
	// Cancelling again is harmless; cancelling a finished job says so.
	require.NoError(t, b.prod.Cancel(testutil.Context(t, 5*time.Second), job.Session, job.ID))
	done := b.submit(t, worker.ToolNoop, `1`, nil)
	b.await(t, done)
	require.ErrorIs(t, b.prod.Cancel(testutil.Context(t, 5*time.Second), done.Session, done.ID), producer.ErrFinished)
}

func TestCancelRunningJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{}, 1)
	stoppedBy := make(chan error, 1)
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("slow", worker.HandlerFunc(func(ctx context.Context, _ *contracts.Job) (json.RawMessage, error) {
			started <- struct{}{}
			<-ctx.Done()
			stoppedBy <- context.Cause(ctx)
			return nil, ctx.Err()
		}), nil))
	})
	job := b.submit(t, "slow", ``, &producer.SubmitOpts{Progress: true})
	<-started
	require.NoError(t, b.prod.Cancel(testutil.Context(t, 5*time.Second), job.Session, job.ID))
	select {
	case err := <-stoppedBy:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("handler context was not cancelled")
	}
	ev := b.await(t, job)
	require.Equal(t, contracts.StatusCancelled, ev.Data.Status)
	requireQueueEmpty(t, b)
	var statuses []contracts.Status
	for _, e := range b.allEvents(t, job.Session) {
		statuses = append(statuses, e.Data.Status)
	}
	require.Equal(t, []contracts.Status{contracts.StatusRunning, contracts.StatusCancelled}, statuses)
}

func TestSleepToolHonoursCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, withBuiltins, nil)
	job := b.submit(t, worker.ToolSleep, `{"ms":60000}`, &producer.SubmitOpts{Progress: true})
	ctx := testutil.Context(t, 10*time.Second)
	require.Eventually(t, func() bool {
		for _, e := range b.allEvents(t, job.Session) {
			if e.Data.Status == contracts.StatusRunning {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	start := time.Now()
	require.NoError(t, b.prod.Cancel(ctx, job.Session, job.ID))
	require.Equal(t, contracts.StatusCancelled, b.await(t, job).Data.Status)
	require.Less(t, time.Since(start), 5*time.Second)
	bad := b.submit(t, worker.ToolSleep, `{"ms":-1}`, nil)
	ev := b.await(t, bad)
	require.Equal(t, contracts.CodeInvalidInput, ev.Data.Error.Code)
}

func TestAttemptTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, &worker.Config{Builtins: true, Tool: worker.ToolConfig{Retry: worker.RetryPolicy{MaxAttempts: 2, InitialInterval: 10 * time.Millisecond, MaxInterval: 10 * time.Millisecond}}}, nil)
	ev := b.await(t, b.submit(t, worker.ToolSleep, `{"ms":5000}`, &producer.SubmitOpts{TimeoutMs: 100}))
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeTimeout, ev.Data.Error.Code)
	require.Equal(t, 2, ev.Data.Attempt)
}

// TestMaxDeliveriesAdvisoryMovesLostJobToDLQ, with session lanes folded
// and apart (then the advisory names the job's lane's consumer).
func TestMaxDeliveriesAdvisoryMovesLostJobToDLQ(t *testing.T) {
	t.Parallel()
	for _, lanes := range []bool{false, true} {
		t.Run(fmt.Sprintf("lanes=%v", lanes), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			// C hears advisories for every tool; it does not run "fragile".
			b.startWorker(t, &worker.Config{Name: "C", SessionLanes: lanes}, nil)

			started := make(chan struct{}, 1)
			release := make(chan struct{})
			ncA := b.srv.Connect(t)
			wa, err := worker.New(ncA, &worker.Config{Name: "A", Logger: quiet, SessionLanes: lanes})
			require.NoError(t, err)
			require.NoError(t, wa.Register("fragile", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
				started <- struct{}{}
				<-release
				return nil, nil
			}), &worker.ToolConfig{AckWait: 300 * time.Millisecond, Retry: worker.RetryPolicy{MaxAttempts: 1}}))
			require.NoError(t, wa.Start(testutil.Context(t, 10*time.Second)))
			job := b.submit(t, "fragile", `{"n":7}`, &producer.SubmitOpts{Session: quietSession}) // lane 1
			<-started
			ncA.Close() // dies during its last (only) attempt
			close(release)

			ev := b.await(t, job)
			require.Equal(t, contracts.StatusFailed, ev.Data.Status)
			require.Equal(t, contracts.CodeInternalError, ev.Data.Error.Code)
			require.Contains(t, ev.Data.Error.Message, "attempts exhausted")
			dl := readDLQ(t, b, "fragile")
			require.Equal(t, job.ID, dl.JobID)
			requireQueueEmpty(t, b)
			stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			require.NoError(t, wa.Stop(stopCtx))
		})
	}
}

func TestTwoWorkersStartAtOnce(t *testing.T) {
	t.Parallel()
	for i := range 3 {
		srv := testutil.StartJetStream(t)
		var g errgroup.Group
		ws := make([]*worker.Worker, 2)
		for j := range ws {
			w, err := worker.New(srv.Connect(t), &worker.Config{Name: fmt.Sprintf("w%d-%d", i, j), Logger: quiet})
			require.NoError(t, err)
			ws[j] = w
			g.Go(func() error { return w.Start(testutil.Context(t, 10*time.Second)) })
		}
		require.NoError(t, g.Wait())
		for _, w := range ws {
			require.NoError(t, w.Stop(testutil.Context(t, 10*time.Second)))
			<-w.Stopped()
		}
	}
}

func TestStopBeforeStartAndTwice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w, err := worker.New(b.nc, &worker.Config{Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, w.Stop(testutil.Context(t, time.Second)))
	require.NoError(t, w.Start(testutil.Context(t, 10*time.Second)))
	require.ErrorIs(t, w.Start(testutil.Context(t, time.Second)), worker.ErrStarted)
	require.ErrorIs(t, w.Register("late", worker.HandlerFunc(nil), nil), worker.ErrStarted)
	require.NoError(t, w.Stop(testutil.Context(t, 5*time.Second)))
	require.NoError(t, w.Stop(testutil.Context(t, 5*time.Second)))
	<-w.Stopped()
}

// exactlyOneTerminal checks every job of ids has exactly one terminal event
// and that it is the last event of the job.
func exactlyOneTerminal(t *testing.T, b *bundle, session string, ids map[string]bool, want contracts.Status) {
	t.Helper()
	terminal := map[string]int{}
	last := map[string]contracts.Status{}
	for _, ev := range b.allEvents(t, session) {
		if ev.Data.Status.Terminal() {
			terminal[ev.Data.JobID]++
		}
		last[ev.Data.JobID] = ev.Data.Status
	}
	require.Len(t, terminal, len(ids))
	for id := range ids {
		require.Equal(t, 1, terminal[id], "job %s", id)
		require.Equal(t, want, last[id], "job %s", id)
	}
}

func TestGracefulStopUnderLoadLosesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32
	handler := worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
		runs.Add(1)
		select {
		case <-time.After(20 * time.Millisecond):
			return job.Input, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	register := func(w *worker.Worker) {
		require.NoError(t, w.Register("work", handler, &worker.ToolConfig{Concurrency: 8}))
	}
	wa, err := worker.New(b.srv.Connect(t), &worker.Config{Name: "A", Logger: quiet, StopTimeout: 30 * time.Millisecond})
	require.NoError(t, err)
	register(wa)
	require.NoError(t, wa.Start(testutil.Context(t, 10*time.Second)))

	const n = 400
	ids := map[string]bool{}
	for i := range n {
		job := b.submit(t, "work", fmt.Sprintf("%d", i), &producer.SubmitOpts{Session: "load"})
		ids[job.ID] = true
	}
	require.Eventually(t, func() bool { return runs.Load() > 40 }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, wa.Stop(testutil.Context(t, 10*time.Second)))
	<-wa.Stopped()
	b.startWorker(t, &worker.Config{Name: "B"}, register)

	ctx := testutil.Context(t, 60*time.Second)
	for id := range ids {
		ev, err := b.prod.Await(ctx, "load", id, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	}
	requireQueueEmpty(t, b)
	exactlyOneTerminal(t, b, "load", ids, contracts.StatusCompleted)
}

func TestTwoWorkersTenThousandJobsExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs sync.Map
	var dup atomic.Int32
	handler := worker.HandlerFunc(func(_ context.Context, job *contracts.Job) (json.RawMessage, error) {
		if _, loaded := runs.LoadOrStore(job.ID, true); loaded {
			dup.Add(1)
		}
		return job.Input, nil
	})
	for _, name := range []string{"A", "B"} {
		b.startWorker(t, &worker.Config{Name: name}, func(w *worker.Worker) {
			require.NoError(t, w.Register("bulk", handler, &worker.ToolConfig{Concurrency: 32}))
		})
	}
	const n = 10000
	ctx := testutil.Context(t, 120*time.Second)
	ids := make([]string, n)
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			job, err := b.prod.Submit(ctx, "bulk", json.RawMessage(fmt.Sprintf("%d", i)), &producer.SubmitOpts{Session: "bulk"})
			if err == nil {
				ids[i] = job.ID
			}
			return err
		})
	}
	require.NoError(t, g.Wait())
	g = errgroup.Group{}
	g.SetLimit(256)
	for i, id := range ids {
		g.Go(func() error {
			ev, err := b.prod.Await(ctx, "bulk", id, nil)
			if err != nil {
				return err
			}
			if ev.Data.Status != contracts.StatusCompleted || string(ev.Data.Result) != fmt.Sprintf("%d", i) {
				return fmt.Errorf("job %s: %s %s", id, ev.Data.Status, ev.Data.Result)
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	set := map[string]bool{}
	for _, id := range ids {
		set[id] = true
	}
	exactlyOneTerminal(t, b, "bulk", set, contracts.StatusCompleted)
	require.Equal(t, int32(0), dup.Load(), "no job may run twice")
	requireQueueEmpty(t, b)
}

// A Start that fails (here: its context is already over) leaves the worker
// stopped: Stop is harmless, Stopped is closed, and Start can be retried.
func TestStopAfterFailedStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w, err := worker.New(b.srv.Connect(t), &worker.Config{Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, w.Register("echo", worker.HandlerFunc(func(_ context.Context, j *contracts.Job) (json.RawMessage, error) {
		return j.Input, nil
	}), nil))
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, w.Start(ended))
	require.NotPanics(t, func() { require.NoError(t, w.Stop(testutil.Context(t, 5*time.Second))) })
	select {
	case <-w.Stopped():
	default:
		t.Fatal("Stopped is not closed after a failed Start and a Stop")
	}

	require.NoError(t, w.Start(testutil.Context(t, 10*time.Second)), "a failed Start can be retried")
	ev := b.await(t, b.submit(t, "echo", `7`, nil))
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	require.NoError(t, w.Stop(testutil.Context(t, 10*time.Second)))
	<-w.Stopped()
}
