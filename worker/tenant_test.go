package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/worker"
)

// TestTenantJobs runs jobs with one id for the default tenant and two named
// tenants: each is answered under the tenant of its subject (a body that
// claims another tenant changes nothing), and no event is taken for a
// duplicate of another tenant's.
func TestTenantJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, &worker.Config{Builtins: true, Tenants: true}, nil)
	ctx := testutil.Context(t, 20*time.Second)
	s := contracts.Subjects{}
	// The default tenant and ACME use the same job id (in different job
	// streams, so both run); their events share the events stream and must
	// not be taken for duplicates of each other. The body's "tenant" is
	// ignored: the tenant comes from the subject. (Named tenants share the
	// tenant stream's duplicate window, so two of them cannot both use one
	// id yet: a job needs its id as Nats-Msg-Id.)
	for _, tenant := range []string{"", "ACME"} {
		body := `{"id":"same","tool":"noop","session":"s1","tenant":"GLOBEX","input":{"for":"` + tenant + `"},"created_at":"2026-01-01T00:00:00Z"}`
		ack, err := b.js.Publish(ctx, s.TenantJob(tenant, worker.ToolNoop), []byte(body), jetstream.WithMsgID("same"))
		require.NoError(t, err)
		want := s.JobsStream()
		if tenant != "" {
			want = s.TenantJobsStream()
		}
		require.Equal(t, want, ack.Stream)
	}
	events, err := b.js.Stream(ctx, s.EventsStream())
	require.NoError(t, err)
	for _, tenant := range []string{"", "ACME"} {
		var ev *contracts.Event
		for ev == nil || !ev.Data.Status.Terminal() {
			m, err := events.GetLastMsgForSubject(ctx, s.TenantEvent(tenant, "s1", "same"))
			if err == nil {
				ev, err = contracts.DecodeEvent(m.Data)
				require.NoError(t, err)
				continue
			}
			require.ErrorIs(t, err, jetstream.ErrMsgNotFound, "tenant %q", tenant)
			require.NoError(t, ctx.Err(), "no terminal event for tenant %q", tenant)
			time.Sleep(20 * time.Millisecond) // polling the server
		}
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "tenant %q: %v", tenant, ev.Data.Error)
		var got struct{ For string }
		require.NoError(t, json.Unmarshal(ev.Data.Result, &got))
		require.Equal(t, tenant, got.For)
	}
	// A tenant that is no valid id is refused by the server's subject rules
	// or by the worker; nothing answers under the default tenant for it.
	_, err = b.js.Publish(ctx, "toolq.t.a b.jobs.noop", []byte(`{}`))
	require.Error(t, err)
}

// TestDefaultTenantOnly: a tool kept to the default tenant fails a named
// tenant's job with invalid_input, in that tenant's events.
func TestDefaultTenantOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, &worker.Config{Tenants: true}, func(w *worker.Worker) {
		require.NoError(t, w.Register("local", worker.HandlerFunc(func(_ context.Context, _ *contracts.Job) (json.RawMessage, error) {
			return json.RawMessage(`"ran"`), nil
		}), &worker.ToolConfig{DefaultTenantOnly: true}))
	})
	ctx := testutil.Context(t, 20*time.Second)
	s := contracts.Subjects{}
	_, err := b.js.Publish(ctx, s.TenantJob("ACME", "local"), []byte(`{"id":"j1","tool":"local","session":"s1","created_at":"2026-01-01T00:00:00Z"}`))
	require.NoError(t, err)
	job := b.submit(t, "local", "", nil)
	require.Equal(t, contracts.StatusCompleted, b.await(t, job).Data.Status)
	events, err := b.js.Stream(ctx, s.EventsStream())
	require.NoError(t, err)
	for {
		m, err := events.GetLastMsgForSubject(ctx, s.TenantEvent("ACME", "s1", "j1"))
		if err == nil {
			ev, err := contracts.DecodeEvent(m.Data)
			require.NoError(t, err)
			require.Equal(t, contracts.StatusFailed, ev.Data.Status)
			require.Equal(t, contracts.CodeInvalidInput, ev.Data.Error.Code)
			return
		}
		require.NoError(t, ctx.Err())
		time.Sleep(20 * time.Millisecond) // polling the server
	}
}
