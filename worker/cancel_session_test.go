package worker_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

// cancelFrom cancels jobID as session would: the producer's mark and
// notice, whatever it answers about a job it does not find there.
func (b *bundle) cancelFrom(t *testing.T, session, jobID string) {
	t.Helper()
	err := b.prod.Cancel(testutil.Context(t, 5*time.Second), session, jobID)
	if err != nil {
		require.ErrorIs(t, err, producer.ErrUnknownJob)
	}
}

// A queued job starts unless a cancel names its own session: a pre-cancel
// of a guessed id and a cancel by id from another session leave it alone.
func TestQueuedCancelNamesTheSession(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ran := make(chan string, 8)
	later := func(w *worker.Worker) {
		require.NoError(t, w.Register("later", worker.HandlerFunc(func(_ context.Context, j *contracts.Job) (json.RawMessage, error) {
			ran <- j.ID
			return json.RawMessage(`"ran"`), nil
		}), nil))
	}
	// The tool's consumer exists; its only worker went away.
	first := b.startWorker(t, nil, later)
	require.NoError(t, first.Stop(testutil.Context(t, 10*time.Second)))

	// Another session marks an id before the victim submits it, and
	// cancels a queued job of the victim's by its id.
	b.cancelFrom(t, "intruder", "pre-guessed")
	victim := b.submit(t, "later", `{}`, &producer.SubmitOpts{ID: "pre-guessed"})
	queued := b.submit(t, "later", `{}`, nil)
	b.cancelFrom(t, "intruder", queued.ID)
	// The job's own session cancels one of its queued jobs.
	own := b.submit(t, "later", `{}`, nil)
	require.NoError(t, b.prod.Cancel(testutil.Context(t, 5*time.Second), own.Session, own.ID))
	// And cancels an id before its submit lands (a cancel racing a
	// submit): the producer finds no job, the mark still holds.
	require.ErrorIs(t, b.prod.Cancel(testutil.Context(t, 5*time.Second), "s1", "raced"), producer.ErrUnknownJob)
	raced := b.submit(t, "later", `{}`, &producer.SubmitOpts{ID: "raced"})

	b.startWorker(t, nil, later)
	for _, job := range []*contracts.Job{victim, queued} {
		ev := b.await(t, job)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%s: %v", job.ID, ev.Data.Error)
		require.JSONEq(t, `"ran"`, string(ev.Data.Result))
	}
	for _, job := range []*contracts.Job{own, raced} {
		ev := b.await(t, job)
		require.Equal(t, contracts.StatusCancelled, ev.Data.Status, job.ID)
	}
	requireQueueEmpty(t, b)
	close(ran)
	var runs []string
	for id := range ran {
		runs = append(runs, id)
	}
	require.ElementsMatch(t, []string{victim.ID, queued.ID}, runs, "the cancelled job never ran")
}

// A running job is cancelled only by a cancel that names its session.
func TestRunningCancelNamesTheSession(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan string, 2)
	var mu sync.Mutex
	releases := map[string]chan struct{}{}
	release := func(id string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if releases[id] == nil {
			releases[id] = make(chan struct{})
		}
		return releases[id]
	}
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("hold", worker.HandlerFunc(func(ctx context.Context, j *contracts.Job) (json.RawMessage, error) {
			started <- j.ID
			select {
			case <-release(j.ID):
				return json.RawMessage(`"done"`), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}), &worker.ToolConfig{Concurrency: 2}))
	})
	ctx := testutil.Context(t, 30*time.Second)
	cancelSubject := contracts.Subjects{}.Cancel

	victim := b.submit(t, "hold", ``, nil)
	require.Equal(t, victim.ID, <-started)
	// Wrong session, no session, a session that is no id: none cancels.
	for _, body := range []string{"intruder", "", "s1.x", "s*"} {
		require.NoError(t, b.nc.Publish(cancelSubject(victim.ID), []byte(body)))
	}
	b.cancelFrom(t, "intruder", victim.ID) // the mark and the notice

	// A cancel naming the session, on the same subscription after those,
	// ends the job it names: the worker has handled the ones before.
	own := b.submit(t, "hold", ``, nil)
	require.Equal(t, own.ID, <-started)
	require.NoError(t, b.nc.Publish(cancelSubject(own.ID), []byte(own.Session)))
	ev, err := b.prod.Await(ctx, own.Session, own.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCancelled, ev.Data.Status)

	close(release(victim.ID))
	ev, err = b.prod.Await(ctx, victim.Session, victim.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	require.JSONEq(t, `"done"`, string(ev.Data.Result))
}
