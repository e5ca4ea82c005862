package worker_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

// A job for a tool nobody serves, or whose workers all went away, ends
// after the queue-time limit with a failed event and a dead letter, swept
// by a worker of other tools; a job of a served tool waiting behind a busy
// worker is not touched, however long it waits.
func TestUnservedJobsEndAfterMaxQueueTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const limit = 300 * time.Millisecond
	started := make(chan string, 4)
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	busy := func(w *worker.Worker) {
		require.NoError(t, w.Register("busy", worker.HandlerFunc(func(_ context.Context, j *contracts.Job) (json.RawMessage, error) {
			started <- j.ID
			<-release
			return json.RawMessage(`"done"`), nil
		}), &worker.ToolConfig{Concurrency: 1}))
	}
	b.startWorker(t, &worker.Config{MaxQueueTime: limit, MaxQueueTimes: map[string]time.Duration{"exempt": -1}}, busy)
	t.Cleanup(free) // runs before the worker's stop, which waits for the handler
	// A tool whose only worker went away: its consumer stays.
	gone := b.startWorker(t, &worker.Config{MaxQueueTime: -1}, func(w *worker.Worker) {
		require.NoError(t, w.Register("gone", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			return nil, nil
		}), nil))
	})
	require.NoError(t, gone.Stop(testutil.Context(t, 10*time.Second)))

	ctx := testutil.Context(t, 30*time.Second)
	unchecked, err := producer.New(b.nc, &producer.Config{Session: "s1", Logger: quiet, SubmitUnserved: true})
	require.NoError(t, err)
	t.Cleanup(unchecked.Close)
	exempt, err := unchecked.Submit(ctx, "exempt", nil, nil)
	require.NoError(t, err)
	first := b.submit(t, "busy", `{}`, nil)
	require.Equal(t, first.ID, <-started)
	waiting := b.submit(t, "busy", `{}`, nil) // behind the busy one
	nobody, err := unchecked.Submit(ctx, "nosuchtool", json.RawMessage(`{"a":1}`), nil)
	require.NoError(t, err)
	goneJob := b.submit(t, "gone", `{}`, nil)

	for tool, job := range map[string]*contracts.Job{"nosuchtool": nobody, "gone": goneJob} {
		ev := b.await(t, job)
		require.Equal(t, contracts.StatusFailed, ev.Data.Status, tool)
		require.Equal(t, contracts.CodeRuntimeUnavailable, ev.Data.Error.Code)
		require.Equal(t, "no worker served tool "+tool+" within 300ms", ev.Data.Error.Message)
		dl := readDLQ(t, b, tool)
		require.Equal(t, job.ID, dl.JobID)
		require.Equal(t, contracts.CodeRuntimeUnavailable, dl.Error.Code)
	}
	// A job submitted now is swept by a later sweep than those, which
	// had listed the busy and exempt subjects and found their jobs older
	// than the limit: once it has ended, that sweep is over.
	probe, err := unchecked.Submit(ctx, "probe", nil, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusFailed, b.await(t, probe).Data.Status)

	// A tool without a limit keeps its job queued, with no event.
	st, err := b.js.Stream(ctx, contracts.Subjects{}.JobsStream())
	require.NoError(t, err)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(contracts.Subjects{}.SessionJob(exempt)))
	require.NoError(t, err)
	// On its session's lane (contracts.SessionJob): nobody serves the tool.
	require.Equal(t, map[string]uint64{contracts.Subjects{}.SessionJob(exempt): 1}, info.State.Subjects)
	for _, ev := range b.allEvents(t, exempt.Session) {
		require.NotEqual(t, exempt.ID, ev.Data.JobID, "the exempt job has no event")
	}
	// The busy tool's waiting job was never swept: it runs.
	free()
	require.Equal(t, waiting.ID, <-started)
	for _, job := range []*contracts.Job{first, waiting} {
		ev := b.await(t, job)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	}
}

func TestMaxQueueTimesNamesTools(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	_, err := worker.New(srv.Connect(t), &worker.Config{Logger: quiet, MaxQueueTimes: map[string]time.Duration{"no tool": time.Second}})
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
}

// A tenant's job for a tool nobody serves ends the same way, in the
// tenant's own events: a tenant's producer cannot check at submit.
func TestTenantUnservedJobEndsAfterMaxQueueTime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	addTenant(t, b, "ACME")
	b.startWorker(t, &worker.Config{Builtins: true, Tenants: true, MaxQueueTime: 200 * time.Millisecond}, nil)
	ctx := testutil.Context(t, 20*time.Second)
	s := contracts.Subjects{}
	body := `{"id":"t-unserved","tool":"nosuchtool","session":"s1","created_at":"2026-01-01T00:00:00Z"}`
	_, err := b.js.Publish(ctx, s.TenantJob("ACME", "nosuchtool"), []byte(body), jetstream.WithMsgID("t-unserved"))
	require.NoError(t, err)
	events, err := b.js.Stream(ctx, s.EventsStream())
	require.NoError(t, err)
	var ev *contracts.Event
	for ev == nil {
		m, err := events.GetLastMsgForSubject(ctx, s.TenantEvent("ACME", "s1", "t-unserved"))
		if err == nil {
			ev, err = contracts.DecodeEvent(m.Data)
			require.NoError(t, err)
			break
		}
		require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
		require.NoError(t, ctx.Err(), "no event for the tenant's job")
		time.Sleep(20 * time.Millisecond) // polling the server
	}
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeRuntimeUnavailable, ev.Data.Error.Code)
	_, err = events.GetLastMsgForSubject(ctx, s.Event("s1", "t-unserved"))
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound, "nothing under the default tenant")
	// The message leaves the tenant's queue right after the event.
	require.Eventually(t, func() bool {
		st, err := b.js.Stream(testutil.Context(t, 5*time.Second), s.TenantJobsStream("ACME"))
		return err == nil && st.CachedInfo().State.Msgs == 0
	}, 10*time.Second, 20*time.Millisecond)
}
