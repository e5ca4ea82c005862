package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/worker"
)

// addTenant registers a named tenant the way `toolq tenant add` does.
func addTenant(t *testing.T, b *bundle, name string) {
	t.Helper()
	ctx := testutil.Context(t, 10*time.Second)
	require.NoError(t, bus.AddTenant(ctx, b.js, bus.Config{}, contracts.TenantRecord{Name: name}))
}

// TestTenantJobs runs jobs with one id for the default tenant and two named
// tenants, one of them added while the worker runs: each is answered under
// the tenant of its subject (a body that claims another tenant changes
// nothing), and none is taken for a duplicate of another tenant's: each
// named tenant has a jobs stream, and so a duplicate window, of its own.
func TestTenantJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	addTenant(t, b, "ACME")
	b.startWorker(t, &worker.Config{Builtins: true, Tenants: true}, nil)
	addTenant(t, b, "INITECH")
	ctx := testutil.Context(t, 20*time.Second)
	s := contracts.Subjects{}
	tenants := []string{"", "ACME", "INITECH"}
	for _, tenant := range tenants {
		body := `{"id":"same","tool":"noop","session":"s1","tenant":"GLOBEX","input":{"for":"` + tenant + `"},"created_at":"2026-01-01T00:00:00Z"}`
		ack, err := b.js.Publish(ctx, s.TenantJob(tenant, worker.ToolNoop), []byte(body), jetstream.WithMsgID("same"))
		require.NoError(t, err)
		require.False(t, ack.Duplicate, "tenant %q", tenant)
		want := s.JobsStream()
		if tenant != "" {
			want = s.TenantJobsStream(tenant)
		}
		require.Equal(t, want, ack.Stream)
	}
	// Within a tenant the id is still a duplicate.
	ack, err := b.js.Publish(ctx, s.TenantJob("ACME", worker.ToolNoop), []byte(`{}`), jetstream.WithMsgID("same"))
	require.NoError(t, err)
	require.True(t, ack.Duplicate)
	// GLOBEX is no tenant yet: nothing takes its jobs.
	_, err = b.js.Publish(ctx, s.TenantJob("GLOBEX", worker.ToolNoop), []byte(`{}`))
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
	events, err := b.js.Stream(ctx, s.EventsStream())
	require.NoError(t, err)
	for _, tenant := range tenants {
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
	// A removed tenant's jobs stream goes with it.
	require.NoError(t, bus.RemoveTenant(ctx, b.js, s, "INITECH"))
	_, err = b.js.Publish(ctx, s.TenantJob("INITECH", worker.ToolNoop), []byte(`{}`))
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
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
	addTenant(t, b, "ACME")
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

// TestTenantMaxDeliveries: a named tenant's job whose worker died during
// its last attempt is moved to the DLQ and failed in the tenant's events,
// as the default tenant's is; and an advisory forged from inside the toolq
// account for a job the consumer never delivered changes nothing.
func TestTenantMaxDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	addTenant(t, b, "ACME")
	b.startWorker(t, &worker.Config{Name: "C", Tenants: true}, nil)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	ncA := b.srv.Connect(t)
	wa, err := worker.New(ncA, &worker.Config{Name: "A", Logger: quiet, Tenants: true})
	require.NoError(t, err)
	require.NoError(t, wa.Register("fragile", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
		started <- struct{}{}
		<-release
		return nil, nil
	}), &worker.ToolConfig{AckWait: 300 * time.Millisecond, Retry: worker.RetryPolicy{MaxAttempts: 1}}))
	require.NoError(t, wa.Start(testutil.Context(t, 10*time.Second)))
	ctx := testutil.Context(t, 30*time.Second)
	s := contracts.Subjects{}
	_, err = b.js.Publish(ctx, s.TenantJob("ACME", "fragile"), []byte(`{"id":"lost","tool":"fragile","session":"s1","created_at":"2026-01-01T00:00:00Z"}`), jetstream.WithMsgID("lost"))
	require.NoError(t, err)
	<-started
	ncA.Close() // dies during its last (only) attempt
	close(release)
	ev := lastEvent(t, b, "ACME", "s1", "lost")
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Contains(t, ev.Data.Error.Message, "attempts exhausted")
	require.Equal(t, "lost", readDLQ(t, b, "fragile").JobID)

	// A queued job of a consumer that exists but has not delivered it.
	_, err = b.js.CreateOrUpdateConsumer(ctx, s.TenantJobsStream("ACME"), jetstream.ConsumerConfig{
		Durable: s.ConsumerName("idle"), FilterSubject: s.TenantJob("ACME", "idle"), AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 3,
	})
	require.NoError(t, err)
	ack, err := b.js.Publish(ctx, s.TenantJob("ACME", "idle"), []byte(`{"id":"queued","tool":"idle","session":"s1","created_at":"2026-01-01T00:00:00Z"}`))
	require.NoError(t, err)
	forged := fmt.Appendf(nil, `{"stream":%q,"consumer":%q,"stream_seq":%d,"deliveries":3}`, ack.Stream, s.ConsumerName("idle"), ack.Sequence)
	require.NoError(t, b.nc.Publish(s.MaxDeliveriesAdvisories(ack.Stream)[:len(s.MaxDeliveriesAdvisories(ack.Stream))-1]+s.ConsumerName("idle"), forged))
	require.NoError(t, b.nc.Flush())
	// The worker reads the advisory at once; give it the time a real one takes.
	time.Sleep(500 * time.Millisecond)
	st, err := b.js.Stream(ctx, ack.Stream)
	require.NoError(t, err)
	_, err = st.GetMsg(ctx, ack.Sequence)
	require.NoError(t, err, "a forged advisory removed a queued job")
	require.NoError(t, wa.Stop(testutil.Context(t, 5*time.Second)))
}

// lastEvent waits for a terminal event of a tenant's job.
func lastEvent(t *testing.T, b *bundle, tenant, session, id string) *contracts.Event {
	t.Helper()
	ctx := testutil.Context(t, 30*time.Second)
	events, err := b.js.Stream(ctx, contracts.Subjects{}.EventsStream())
	require.NoError(t, err)
	for {
		m, err := events.GetLastMsgForSubject(ctx, contracts.Subjects{}.TenantEvent(tenant, session, id))
		if err == nil {
			ev, err := contracts.DecodeEvent(m.Data)
			require.NoError(t, err)
			if ev.Data.Status.Terminal() {
				return ev
			}
		}
		require.NoError(t, ctx.Err(), "no terminal event")
		time.Sleep(20 * time.Millisecond) // polling the server
	}
}

// TestTenantNestedReport: a named tenant's job with a parent reports its
// end, with the call's token, as a code_mode.result job on the tenant's own
// subject (so in its own jobs stream, to its own runs); a tenant's job
// whose parent names another continuation is refused and reports nothing.
func TestTenantNestedReport(t *testing.T) {
	t.Parallel()
	b := setup(t)
	addTenant(t, b, "ACME")
	type report struct {
		tenant, tool string
		tr           contracts.ToolResult
	}
	got := make(chan report, 8)
	collect := func(_ context.Context, j *contracts.Job) (json.RawMessage, error) {
		var tr contracts.ToolResult
		require.NoError(t, json.Unmarshal(j.Input, &tr))
		got <- report{tenant: j.Tenant, tool: j.Tool, tr: tr}
		return nil, nil
	}
	b.startWorker(t, &worker.Config{Builtins: true, Tenants: true}, func(w *worker.Worker) {
		require.NoError(t, w.Register(contracts.ToolCodeModeResult, worker.HandlerFunc(collect), nil))
		require.NoError(t, w.Register("batch.result", worker.HandlerFunc(collect), nil))
	})
	ctx := testutil.Context(t, 20*time.Second)
	s := contracts.Subjects{}
	publish := func(id, parentTool string) {
		body := fmt.Sprintf(`{"id":%q,"tool":"noop","session":"s1","input":"v","parent":{"run_id":"r1","call_id":"c1","tool":%q,"token":"secret-token"},"created_at":"2026-01-01T00:00:00Z"}`, id, parentTool)
		_, err := b.js.Publish(ctx, s.TenantJob("ACME", worker.ToolNoop), []byte(body), jetstream.WithMsgID(id))
		require.NoError(t, err)
	}
	publish("other-continuation", "batch.result")
	ev := lastEvent(t, b, "ACME", "s1", "other-continuation")
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeInvalidInput, ev.Data.Error.Code)

	publish("nested", contracts.ToolCodeModeResult)
	require.Equal(t, contracts.StatusCompleted, lastEvent(t, b, "ACME", "s1", "nested").Data.Status)
	select {
	case r := <-got:
		require.Equal(t, "ACME", r.tenant, "the report stays in the job's tenant")
		require.Equal(t, contracts.ToolCodeModeResult, r.tool)
		require.Equal(t, "nested", r.tr.JobID)
		require.Equal(t, "secret-token", r.tr.Token)
		require.JSONEq(t, `"v"`, string(r.tr.Result))
	case <-ctx.Done():
		t.Fatal("no report of the nested job")
	}
	require.Empty(t, got, "the refused job reported to nobody")
}

// lastTenantEvent polls for the terminal event of a tenant's job.
func lastTenantEvent(t *testing.T, b *bundle, tenant, session, id string) *contracts.Event {
	t.Helper()
	ctx := testutil.Context(t, 20*time.Second)
	s := contracts.Subjects{}
	events, err := b.js.Stream(ctx, s.EventsStream())
	require.NoError(t, err)
	for {
		m, err := events.GetLastMsgForSubject(ctx, s.TenantEvent(tenant, session, id))
		if err == nil {
			ev, err := contracts.DecodeEvent(m.Data)
			require.NoError(t, err)
			if ev.Data.Status.Terminal() {
				return ev
			}
		}
		require.NoError(t, ctx.Err(), "no terminal event of %s/%s", tenant, id)
		time.Sleep(20 * time.Millisecond) // polling the server
	}
}

// TestToolKeptToTenants: a tool kept to ACME (ToolConfig.Tenants) is
// pulled only from ACME's stream: GLOBEX's job of it is served by nobody
// and fails runtime_unavailable at the queue-time limit, in GLOBEX's
// events; the default tenant's submit is refused (no worker serves it:
// invalid_input, as for any tool nobody serves);
// its catalog entry names ACME, and a tool without the list names none.
func TestToolKeptToTenants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	addTenant(t, b, "ACME")
	addTenant(t, b, "GLOBEX")
	b.startWorker(t, &worker.Config{Tenants: true, Builtins: true, MaxQueueTime: 500 * time.Millisecond}, func(w *worker.Worker) {
		require.NoError(t, w.Register("acme_only", worker.HandlerFunc(func(_ context.Context, j *contracts.Job) (json.RawMessage, error) {
			return json.Marshal("ran for " + j.Tenant)
		}), &worker.ToolConfig{Tenants: []string{"ACME"}, Catalog: &contracts.CatalogTool{Description: "ACME's."}}))
	})
	ctx := testutil.Context(t, 20*time.Second)
	s := contracts.Subjects{}
	for _, tenant := range []string{"ACME", "GLOBEX"} {
		_, err := b.js.Publish(ctx, s.TenantJob(tenant, "acme_only"), []byte(`{"id":"j1","tool":"acme_only","session":"s1","created_at":"2026-01-01T00:00:00Z"}`), jetstream.WithMsgID("j1"))
		require.NoError(t, err)
	}
	ev := lastTenantEvent(t, b, "ACME", "s1", "j1")
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	require.JSONEq(t, `"ran for ACME"`, string(ev.Data.Result))
	ev = lastTenantEvent(t, b, "GLOBEX", "s1", "j1")
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeRuntimeUnavailable, ev.Data.Error.Code, ev.Data.Error.Message)

	_, err := b.prod.Submit(ctx, "acme_only", nil, nil)
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
	require.ErrorContains(t, err, `no worker serves tool "acme_only"`, "the default tenant is not served")

	kv, err := b.js.KeyValue(ctx, s.CatalogBucket())
	require.NoError(t, err)
	for key, want := range map[string][]string{"toolq.core.acme_only": {"ACME"}, "toolq.core.noop": nil} {
		e, err := kv.Get(ctx, key)
		require.NoError(t, err)
		var entry contracts.CatalogTool
		require.NoError(t, json.Unmarshal(e.Value(), &entry))
		require.Equal(t, want, entry.Tenants, key)
	}
}

// TestTenantReplaysShareAWorker holds a worker's replays once they have
// their slots: a tenant with its share running has its next replay refused
// as busy at once, while another tenant's is taken and runs once they are
// let go. A tenant that floods replays so fills its own share, never every
// slot.
func TestTenantReplaysShareAWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	addTenant(t, b, "ACME")
	addTenant(t, b, "GLOBEX")
	w := b.startWorker(t, &worker.Config{Tenants: true}, nil)
	var once sync.Once
	hold := worker.HoldReplays(w)
	release := func() { once.Do(hold) }
	t.Cleanup(release) // before the worker's stop, which waits for them

	ask := func(tenant string) chan *nats.Msg {
		t.Helper()
		inbox := nats.NewInbox()
		answers := make(chan *nats.Msg, 16)
		sub, err := b.nc.ChanSubscribe(inbox, answers)
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Unsubscribe() })
		require.NoError(t, b.nc.Flush())
		require.NoError(t, b.nc.PublishRequest("toolq.t."+tenant+".replay.s1", inbox, nil))
		return answers
	}
	next := func(ch chan *nats.Msg) *nats.Msg {
		t.Helper()
		select {
		case m := <-ch:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no answer to a replay request")
			return nil
		}
	}
	// ACME's share runs (held); the next of ACME's is refused at once.
	held := []chan *nats.Msg{ask("ACME"), ask("ACME")}
	third := next(ask("ACME"))
	require.Equal(t, "0", third.Header.Get(contracts.ReplayEndHeader))
	require.Contains(t, third.Header.Get(contracts.ReplayErrorHeader), "busy")
	// GLOBEX's is taken, not refused: it answers once the replays go on.
	globex := ask("GLOBEX")
	release()
	for _, ch := range append(held, globex) {
		end := next(ch)
		require.Equal(t, "0", end.Header.Get(contracts.ReplayEndHeader), "an empty session's replay ends")
		require.Empty(t, end.Header.Get(contracts.ReplayErrorHeader), "a replay that had its slot is not refused")
	}
}
