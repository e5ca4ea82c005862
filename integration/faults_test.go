package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
)

// A worker process killed (SIGKILL) in the middle of a job: the job
// completes on the other worker, exactly once.
func TestKilledWorkerJobCompletesOnAnother(t *testing.T) { //nolint:paralleltest // SIGKILLs worker processes; its nats-server binds a port from FreePort, which can race with another test's pick
	e := setup(t)
	a := startWorker(t, e.srv.URL(), "A", e.keyFile, "--no-code-mode")
	ctx := ctxFor(t, 60*time.Second)
	job, err := e.prod.Submit(ctx, "sleep", json.RawMessage(`{"ms":1500}`), &producer.SubmitOpts{Progress: true})
	require.NoError(t, err)
	// Wait until A runs it, then kill A.
	var running *contracts.Event
	require.Eventually(t, func() bool {
		_ = e.prod.ReadEvents(ctx, job.Session, &producer.ReadOpts{JobID: job.ID}, func(ev *contracts.Event) error {
			if ev.Data.Status == contracts.StatusRunning {
				running = ev
			}
			return nil
		})
		return running != nil
	}, 30*time.Second, 20*time.Millisecond)
	require.True(t, strings.HasSuffix(running.Source, "/A"), running.Source)
	a.kill()
	startWorker(t, e.srv.URL(), "B", e.keyFile, "--no-code-mode")

	ev, err := e.prod.Await(ctx, job.Session, job.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	require.True(t, strings.HasSuffix(ev.Source, "/B"), ev.Source)
	require.Equal(t, 2, ev.Data.Attempt)
	terminal := 0
	require.NoError(t, e.prod.ReadEvents(ctx, job.Session, &producer.ReadOpts{JobID: job.ID}, func(ev *contracts.Event) error {
		if ev.Data.Status.Terminal() {
			terminal++
		}
		return nil
	}))
	require.Equal(t, 1, terminal)
}

// NATS itself restarts (same store) while jobs are queued: nothing is lost.
func TestServerRestartKeepsQueuedJobs(t *testing.T) { //nolint:paralleltest // restarts nats-server on the same port, which another test could take while it is down
	e := setup(t)
	ctx := ctxFor(t, 90*time.Second)
	// Streams exist once a worker has started; stop it so jobs stay queued.
	w := startWorker(t, e.srv.URL(), "W", e.keyFile, "--no-code-mode")
	w.kill()
	var ids []string
	for range 50 {
		job, err := e.prod.Submit(ctx, "noop", json.RawMessage(`{"k":1}`), nil)
		require.NoError(t, err)
		ids = append(ids, job.ID)
	}
	js, err := jetstream.New(e.nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, "TOOLQ_JOBS")
	require.NoError(t, err)
	require.Equal(t, uint64(50), st.CachedInfo().State.Msgs)

	restarted := e.restartServer(t)
	startWorker(t, restarted, "W2", e.keyFile, "--no-code-mode")
	for _, id := range ids {
		ev, err := e.prod.Await(ctx, "it", id, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	}
}
