package codemode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/tools/codemode"
	"github.com/toolq/toolq/worker"
)

// holdTool registers "hold", a catalogued tool whose calls run until the
// test releases them with their input's key: a nested call that is still
// pending for as long as a test needs.
func holdTool(started chan<- string, release <-chan string) func(w *worker.Worker) {
	return func(w *worker.Worker) {
		err := w.Register("hold", worker.HandlerFunc(func(ctx context.Context, j *contracts.Job) (json.RawMessage, error) {
			started <- j.ID
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case v := <-release:
				return json.Marshal(v)
			}
		}), &worker.ToolConfig{Catalog: &contracts.CatalogTool{Description: "Wait for the test."}})
		if err != nil {
			panic(err)
		}
	}
}

// pendingCall reads the one pending call of a run's waiting event.
func pendingCall(t *testing.T, ev *contracts.Event) contracts.CodeModePendingToolCall {
	t.Helper()
	require.Equal(t, contracts.StatusWaiting, ev.Data.Status)
	var w contracts.CodeModeResult
	require.NoError(t, json.Unmarshal(ev.Data.Result, &w))
	require.Len(t, w.PendingToolCalls, 1)
	require.Empty(t, w.PendingToolCalls[0].Token, "the token of a worker's call stays on the bus")
	return w.PendingToolCalls[0]
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return data
}

// TestForgedNestedResultRefused: a code_mode.result job that names a
// pending call by its (predictable) ids but not with its token — none, a
// wrong one — is refused with invalid_input and changes nothing; the run
// completes with the nested job's real value.
func TestForgedNestedResultRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started, release := make(chan string, 1), make(chan string, 1)
	b.startWorker(t, "A", nil, holdTool(started, release))
	job := b.exec(t, `return await tools.callValue("toolq:core:hold", {});`, map[string]any{"autoResume": true}, nil)
	p := pendingCall(t, b.await(t, job, true))
	nested := <-started
	require.Equal(t, contracts.NestedJobID(job.ID, p.CallID), nested)
	ctx := testutil.Context(t, 20*time.Second)
	for i, token := range []string{"", "AAAAAAAAAAAAAAAAAAAAAA"} {
		forged, err := b.prod.Submit(ctx, contracts.ToolCodeModeResult, mustJSON(t, contracts.ToolResult{
			RunID: job.ID, CallID: p.CallID, JobID: nested, Status: contracts.StatusCompleted,
			Result: json.RawMessage(`"forged"`), Token: token,
		}), &producer.SubmitOpts{ID: fmt.Sprintf("forged-%d", i)})
		require.NoError(t, err)
		ev := b.await(t, forged, false)
		require.Equal(t, contracts.StatusFailed, ev.Data.Status, "token %q", token)
		require.Equal(t, contracts.CodeInvalidInput, ev.Data.Error.Code)
		require.Contains(t, ev.Data.Error.Message, "token")
	}
	runs, err := codemode.ListRuns(ctx, testutil.JetStream(t, b.srv.Connect(t)), contracts.Subjects{}, job.Session)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	require.Zero(t, runs[0].Results, "a forged result was recorded")
	require.Equal(t, "waiting", runs[0].Status)

	release <- "real"
	final := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, final.Data.Status, string(final.Data.Result))
	require.JSONEq(t, `"real"`, string(result(t, final.Data.Result).Value))
}

// tenantJob publishes a job of tenant as its account's import would, and
// lastTenantEvent reads the job's last event in the tenant's subspace.
func (b *bundle) tenantJob(t *testing.T, tenant string, job *contracts.Job) {
	t.Helper()
	ctx := testutil.Context(t, 10*time.Second)
	_, err := testutil.JetStream(t, b.srv.Connect(t)).Publish(ctx, contracts.Subjects{}.TenantJob(tenant, job.Tool), mustJSON(t, job), jetstream.WithMsgID(job.ID))
	require.NoError(t, err)
}

func (b *bundle) tenantEvent(t *testing.T, tenant, session, id string, done func(contracts.Status) bool) *contracts.Event {
	t.Helper()
	ctx := testutil.Context(t, 30*time.Second)
	events, err := testutil.JetStream(t, b.srv.Connect(t)).Stream(ctx, contracts.Subjects{}.EventsStream())
	require.NoError(t, err)
	for {
		m, err := events.GetLastMsgForSubject(ctx, contracts.Subjects{}.TenantEvent(tenant, session, id))
		if err == nil {
			ev, err := contracts.DecodeEvent(m.Data)
			require.NoError(t, err)
			if done(ev.Data.Status) {
				return ev
			}
		}
		require.NoError(t, ctx.Err(), "no event of %s/%s/%s", tenant, session, id)
		time.Sleep(20 * time.Millisecond) // polling the server
	}
}

func terminal(s contracts.Status) bool { return s.Terminal() }

func parked(s contracts.Status) bool { return s == contracts.StatusWaiting || s.Terminal() }

func codeJob(id, tool, session string, in any) *contracts.Job {
	data, _ := json.Marshal(in)
	return &contracts.Job{ID: id, Tool: tool, Session: session, Input: data, CreatedAt: time.Now().UTC()}
}

// TestTenantRuns: named tenants run code mode. An autoResume run with a
// nested call and a yield completes in its tenant's events, its nested job
// in its tenant's stream; a run waited on is unavailable to another tenant
// (even with the same session name and to the default tenant), belongs to
// a different session for the tenant's other sessions, and its snapshot
// does not restore as another tenant's run even when its record is copied
// under that tenant's key.
func TestTenantRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testutil.Context(t, 30*time.Second)
	js := testutil.JetStream(t, b.srv.Connect(t))
	for _, name := range []string{"ACME", "GLOBEX"} {
		require.NoError(t, bus.AddTenant(ctx, js, bus.Config{}, contracts.TenantRecord{Name: name}))
	}
	started, release := make(chan string, 1), make(chan string, 1)
	b.startWorkerWith(t, &worker.Config{Name: "A", Tenants: true}, nil, holdTool(started, release))
	s := contracts.Subjects{}

	// autoResume: a nested call, then a yield, on ACME's subjects only.
	b.tenantJob(t, "ACME", codeJob("auto", contracts.ToolCodeModeExec, "s1", map[string]any{
		"code":       `const v = await tools.callValue("toolq:core:noop", {n: 7}); await yield_control(); return v.n * 6;`,
		"autoResume": true,
	}))
	ev := b.tenantEvent(t, "ACME", "s1", "auto", terminal)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	require.JSONEq(t, `42`, string(result(t, ev.Data.Result).Value))
	st, err := js.Stream(ctx, s.EventsStream())
	require.NoError(t, err)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(s.Event("s1", ">")))
	require.NoError(t, err)
	require.Empty(t, info.State.Subjects, "a tenant's run wrote events of the default tenant")
	info, err = st.Info(ctx, jetstream.WithSubjectFilter(s.TenantEvent("ACME", "s1", ">")))
	require.NoError(t, err)
	require.Len(t, info.State.Subjects, 4, "the exec job, the nested call, its report and the yield trigger: %v", info.State.Subjects)

	// A run that is waited on, with a nested call held open.
	b.tenantJob(t, "ACME", codeJob("run-w", contracts.ToolCodeModeExec, "s1", map[string]any{
		"code": `return await tools.callValue("toolq:core:hold", {});`,
	}))
	<-started
	waits := []struct{ tenant, session, id, msg string }{
		{"GLOBEX", "s1", "w-globex", "unavailable or expired"},
		{"", "s1", "w-default", "unavailable or expired"},
		{"ACME", "s2", "w-session", "different session"},
	}
	for _, w := range waits {
		b.tenantJob(t, w.tenant, codeJob(w.id, contracts.ToolCodeModeWait, w.session, map[string]string{"runId": "run-w"}))
		ev := b.tenantEvent(t, w.tenant, w.session, w.id, terminal)
		require.Equal(t, contracts.StatusFailed, ev.Data.Status, w.id)
		require.Equal(t, contracts.CodeInvalidInput, ev.Data.Error.Code, w.id)
		require.Contains(t, ev.Data.Error.Message, w.msg, w.id)
	}

	// The nested result comes back; the record, copied under GLOBEX's key,
	// does not resume there: its snapshot is bound to ACME.
	release <- "acme's"
	runs, err := js.KeyValue(ctx, s.RunsBucket())
	require.NoError(t, err)
	var rec map[string]any
	for {
		e, err := runs.Get(ctx, "ACME.s1.run-w")
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(e.Value(), &rec))
		if res, _ := rec["results"].([]any); len(res) == 1 {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the server
	}
	require.Equal(t, "ACME", rec["tenant"])
	rec["tenant"] = "GLOBEX"
	_, err = runs.Put(ctx, "GLOBEX.s1.run-w", mustJSON(t, rec))
	require.NoError(t, err)
	b.tenantJob(t, "GLOBEX", codeJob("w-copy", contracts.ToolCodeModeWait, "s1", map[string]string{"runId": "run-w"}))
	ev = b.tenantEvent(t, "GLOBEX", "s1", "w-copy", terminal)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Contains(t, ev.Data.Error.Message, "snapshot refused")

	b.tenantJob(t, "ACME", codeJob("w-acme", contracts.ToolCodeModeWait, "s1", map[string]string{"runId": "run-w"}))
	ev = b.tenantEvent(t, "ACME", "s1", "w-acme", terminal)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	require.JSONEq(t, `"acme's"`, string(result(t, ev.Data.Result).Value))
	ev = b.tenantEvent(t, "ACME", "s1", "run-w", terminal)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
}

// TestSuspendedRunsCappedPerTenant: a tenant's runs waiting at once are
// capped over all its sessions, so opening a new session per run does not
// get around the per-session cap; another tenant is not touched.
func TestSuspendedRunsCappedPerTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testutil.Context(t, 60*time.Second)
	js := testutil.JetStream(t, b.srv.Connect(t))
	for _, name := range []string{"ACME", "GLOBEX"} {
		require.NoError(t, bus.AddTenant(ctx, js, bus.Config{}, contracts.TenantRecord{Name: name}))
	}
	started, release := make(chan string, 8), make(chan string, 8)
	b.startWorkerWith(t, &worker.Config{Name: "A", Tenants: true}, &codemode.Config{MaxSuspendedPerTenant: 2}, holdTool(started, release))
	hold := map[string]any{"code": `return await tools.callValue("toolq:core:hold", {});`}
	for i, session := range []string{"s1", "s2"} {
		id := fmt.Sprintf("held-%d", i)
		b.tenantJob(t, "ACME", codeJob(id, contracts.ToolCodeModeExec, session, hold))
		require.Equal(t, contracts.StatusWaiting, b.tenantEvent(t, "ACME", session, id, parked).Data.Status)
	}
	b.tenantJob(t, "ACME", codeJob("third", contracts.ToolCodeModeExec, "s3", hold))
	ev := b.tenantEvent(t, "ACME", "s3", "third", terminal)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Contains(t, ev.Data.Error.Message, "per tenant")
	// GLOBEX has its own count.
	b.tenantJob(t, "GLOBEX", codeJob("own", contracts.ToolCodeModeExec, "s1", hold))
	require.Equal(t, contracts.StatusWaiting, b.tenantEvent(t, "GLOBEX", "s1", "own", parked).Data.Status)
}
