package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

// journal records what happened, in order, across goroutines.
type journal struct {
	mu      sync.Mutex
	entries []string
}

func (j *journal) add(s string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, s)
}

func (j *journal) all() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.entries...)
}

// ext is an extension that writes its start and stop to a journal.
type ext struct {
	name     string
	j        *journal
	startErr error
}

func (e *ext) Start(context.Context) error {
	if e.startErr != nil {
		e.j.add(e.name + " start failed")
		return e.startErr
	}
	e.j.add(e.name + " start")
	return nil
}

func (e *ext) Stop(ctx context.Context) error {
	if _, ok := ctx.Deadline(); ok {
		e.j.add(e.name + " stop with a deadline")
	}
	e.j.add(e.name + " stop")
	return nil
}

// Extensions start before the worker takes a job and stop, in reverse
// order, after its jobs have drained.
func TestExtensionsStartBeforeAndStopAfterJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := &journal{}
	started := make(chan struct{})
	release := make(chan struct{})
	w, err := worker.New(b.srv.Connect(t), &worker.Config{Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, w.Use(&ext{name: "a", j: j}))
	require.NoError(t, w.Use(&ext{name: "b", j: j}))
	require.NoError(t, w.Register("work", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
		j.add("job")
		close(started)
		<-release
		j.add("job end")
		return nil, nil
	}), nil))
	require.NoError(t, w.Start(testutil.Context(t, 10*time.Second)))
	job := b.submit(t, "work", ``, nil)
	require.ErrorIs(t, w.Use(&ext{name: "late", j: j}), worker.ErrStarted)
	<-started

	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(testutil.Context(t, 10*time.Second)) }()
	close(release)
	require.NoError(t, <-stopped)
	require.Equal(t, []string{"a start", "b start", "job", "job end", "b stop", "a stop"}, j.all())
	require.Equal(t, contracts.StatusCompleted, b.await(t, job).Data.Status)
}

// A Start that fails after extensions started stops them again (the CLI
// used to leave code mode's and exec's loops running); a Start retried
// after the cause is gone starts them anew.
func TestFailedStartStopsStartedExtensions(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("an extension fails", func(t *testing.T) {
		t.Parallel()
		j := &journal{}
		w, err := worker.New(b.srv.Connect(t), &worker.Config{Logger: quiet})
		require.NoError(t, err)
		bad := &ext{name: "b", j: j, startErr: errors.New("no bucket")}
		require.NoError(t, w.Use(&ext{name: "a", j: j}))
		require.NoError(t, w.Use(bad))
		require.NoError(t, w.Use(&ext{name: "c", j: j}))
		err = w.Start(testutil.Context(t, 10*time.Second))
		require.ErrorIs(t, err, bad.startErr)
		require.Equal(t, []string{"a start", "b start failed", "a stop"}, j.all())
		requireStopped(t, w)

		bad.startErr = nil
		require.NoError(t, w.Start(testutil.Context(t, 10*time.Second)))
		require.NoError(t, w.Stop(testutil.Context(t, 10*time.Second)))
		require.Equal(t, []string{"a start", "b start failed", "a stop", "a start", "b start", "c start", "c stop", "b stop", "a stop"}, j.all())
	})

	t.Run("the worker fails", func(t *testing.T) {
		t.Parallel()
		j := &journal{}
		w, err := worker.New(b.srv.Connect(t), &worker.Config{Logger: quiet})
		require.NoError(t, err)
		require.NoError(t, w.Use(&ext{name: "a", j: j}))
		// The catalog refuses the entry, after the extensions started.
		require.NoError(t, w.Register("broken", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			return nil, nil
		}), &worker.ToolConfig{Catalog: &contracts.CatalogTool{Description: "d", InputSchema: json.RawMessage(`{not json`)}}))
		err = w.Start(testutil.Context(t, 10*time.Second))
		require.ErrorIs(t, err, contracts.ErrInvalidInput)
		require.Equal(t, []string{"a start", "a stop"}, j.all())
		requireStopped(t, w)
		require.NoError(t, w.Stop(testutil.Context(t, 5*time.Second)))
		require.Equal(t, []string{"a start", "a stop"}, j.all(), "nothing more to stop")
	})
}

func requireStopped(t *testing.T, w *worker.Worker) {
	t.Helper()
	select {
	case <-w.Stopped():
	default:
		t.Fatal("Stopped is not closed")
	}
}

// The worker's watch of the cancels bucket is the one cancel feed: hooks
// hear every cancel made while the worker runs, with its session.
func TestCancelHooksHearTheFeed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	heard := make(chan [2]string, 4)
	var order []string
	var mu sync.Mutex
	w := b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.OnCancel(func(_ context.Context, _, session, jobID string) {
			mu.Lock()
			order = append(order, "first")
			mu.Unlock()
			heard <- [2]string{session, jobID}
		}))
		require.NoError(t, w.OnCancel(func(context.Context, string, string, string) {
			mu.Lock()
			order = append(order, "second")
			mu.Unlock()
		}))
	})
	require.ErrorIs(t, w.OnCancel(func(context.Context, string, string, string) {}), worker.ErrStarted)

	ctx := testutil.Context(t, 10*time.Second)
	// Ids no job has yet: the producer says so, and the mark is written.
	require.ErrorIs(t, b.prod.Cancel(ctx, "s9", "queued-job"), producer.ErrUnknownJob)
	select {
	case got := <-heard:
		require.Equal(t, [2]string{"s9", "queued-job"}, got)
	case <-ctx.Done():
		t.Fatal("the hook never heard the cancel")
	}
	require.ErrorIs(t, b.prod.Cancel(ctx, "s9", "another"), producer.ErrUnknownJob)
	<-heard
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"first", "second", "first"}, order[:3], "hooks run in order, one cancel at a time")
}

// A stopped worker starts again: consumers, subscriptions and extensions
// come back.
func TestRestartAfterStop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := &journal{}
	w, err := worker.New(b.srv.Connect(t), &worker.Config{Logger: quiet, Builtins: true})
	require.NoError(t, err)
	require.NoError(t, w.Use(&ext{name: "a", j: j}))
	for range 2 {
		require.NoError(t, w.Start(testutil.Context(t, 10*time.Second)))
		require.Equal(t, contracts.StatusCompleted, b.await(t, b.submit(t, worker.ToolNoop, `1`, nil)).Data.Status)
		require.NoError(t, w.Stop(testutil.Context(t, 10*time.Second)))
		requireStopped(t, w)
	}
	require.Equal(t, []string{"a start", "a stop", "a start", "a stop"}, j.all())
}

func TestBuiltinsAreOptIn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	plain, err := worker.New(b.nc, &worker.Config{Logger: quiet})
	require.NoError(t, err)
	require.Empty(t, plain.Tools(), "a worker runs only the tools it is given")
	diag, err := worker.New(b.nc, &worker.Config{Logger: quiet, Builtins: true})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{worker.ToolNoop, worker.ToolSleep}, diag.Tools())
}
