package codemode_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/tools/codemode"
	"github.com/toolq/toolq/worker"
)

var (
	quiet     = slog.New(slog.DiscardHandler)
	engine    *sandbox.Engine
	engineErr error
	once      sync.Once
)

func TestMain(m *testing.M) {
	code := m.Run()
	if engine != nil {
		_ = engine.Close(context.Background())
	}
	os.Exit(code)
}

func sharedEngine(t *testing.T) *sandbox.Engine {
	t.Helper()
	once.Do(func() {
		engine, engineErr = sandbox.NewEngine(context.Background(), &sandbox.EngineConfig{
			SnapshotKey: []byte("test-key-0123456789abcdef0123456789abcdef"),
		})
	})
	require.NoError(t, engineErr)
	return engine
}

type bundle struct {
	srv  *testutil.Server
	prod *producer.Producer
	url  string // the server process's, for benchmarks
}

func setup(t *testing.T) *bundle {
	t.Helper()
	srv := testutil.StartJetStream(t)
	prod, err := producer.New(srv.Connect(t), &producer.Config{Session: "s1", Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	return &bundle{srv: srv, prod: prod}
}

// setupB is setup for benchmarks: a server, a producer and one code-mode
// worker.
func setupB(b *testing.B) *bundle {
	b.Helper()
	// The server runs as its own process, so this process's memory is the
	// worker's (and the producer's), not the server's.
	proc := testutil.StartServerProcess(b, b.TempDir())
	return setupBOn(b, proc.URL(), 1)
}

// setupBOn is setupB on the servers at url, with streams and buckets of
// that many replicas.
func setupBOn(b *testing.B, url string, replicas int) *bundle {
	b.Helper()
	connect := func() *nats.Conn {
		nc, err := nats.Connect(url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
	prod, err := producer.New(connect(), &producer.Config{Session: "s1", Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(prod.Close)
	bb := &bundle{prod: prod, url: url}
	nc := connect()
	w, err := worker.New(nc, &worker.Config{Name: "bench", Logger: quiet, StopTimeout: time.Second, Builtins: true, Replicas: replicas})
	if err != nil {
		b.Fatal(err)
	}
	eng, err := sandbox.NewEngine(context.Background(), &sandbox.EngineConfig{SnapshotKey: []byte("bench-key-0123456789abcdef0123456789abcdef")})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := codemode.Register(w, nc, &codemode.Config{Engine: eng, Logger: quiet, Replicas: replicas}); err != nil {
		b.Fatal(err)
	}
	ctx := testutil.Context(b, 30*time.Second)
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
		_ = eng.Close(sctx)
	})
	return bb
}

// startWorker starts a worker with code mode and the given extra tools.
// Code mode and tool packs with a lifecycle of their own (exec) are the
// worker's extensions: the worker starts and stops them.
func (b *bundle) startWorker(t *testing.T, name string, cfg *codemode.Config, register func(w *worker.Worker)) *worker.Worker {
	t.Helper()
	return b.startWorkerWith(t, &worker.Config{Name: name}, cfg, register)
}

// startWorkerWith is startWorker with the worker's own configuration (its
// Name, Tenants; the rest is the tests' usual).
func (b *bundle) startWorkerWith(t *testing.T, wc *worker.Config, cfg *codemode.Config, register func(w *worker.Worker)) *worker.Worker {
	t.Helper()
	nc := b.srv.Connect(t)
	w, err := worker.New(nc, &worker.Config{Name: wc.Name, Tenants: wc.Tenants, Logger: quiet, StopTimeout: time.Second, Builtins: true})
	require.NoError(t, err)
	var c codemode.Config
	if cfg != nil {
		c = *cfg
	}
	if c.Engine == nil {
		c.Engine = sharedEngine(t)
	}
	c.Logger = quiet
	cm, err := codemode.Register(w, nc, &c)
	require.NoError(t, err)
	if register != nil {
		register(w)
	}
	require.NoError(t, w.Start(testutil.Context(t, 20*time.Second)))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(sctx))
		select {
		case <-cm.Stopped():
		default:
			t.Error("the worker's Stop did not stop code mode")
		}
	})
	return w
}

func (b *bundle) exec(t *testing.T, code string, extra map[string]any, opts *producer.SubmitOpts) *contracts.Job {
	t.Helper()
	in := map[string]any{"code": code}
	for k, v := range extra {
		in[k] = v
	}
	data, err := json.Marshal(in)
	require.NoError(t, err)
	job, err := b.prod.Submit(testutil.Context(t, 5*time.Second), contracts.ToolCodeModeExec, data, opts)
	require.NoError(t, err)
	return job
}

func (b *bundle) await(t *testing.T, job *contracts.Job, parked bool) *contracts.Event {
	t.Helper()
	ev, err := b.prod.Await(testutil.Context(t, 30*time.Second), job.Session, job.ID, &producer.AwaitOpts{Parked: parked})
	require.NoError(t, err)
	return ev
}

type codeModeResult struct {
	Status           string            `json:"status"`
	Value            json.RawMessage   `json:"value"`
	RunID            string            `json:"runId"`
	Reason           string            `json:"reason"`
	PendingToolCalls []json.RawMessage `json:"pendingToolCalls"`
	Error            string            `json:"error"`
	Code             string            `json:"code"`
	Output           []json.RawMessage `json:"output"`
	Telemetry        struct {
		BridgeCalls struct{ Search, Describe, Call int } `json:"bridgeCalls"`
		NestedCalls int                                  `json:"nestedCalls"`
		Resumes     int                                  `json:"resumes"`
		SuspendedMs float64                              `json:"suspendedMs"`
	} `json:"telemetry"`
}

func result(t *testing.T, raw json.RawMessage) codeModeResult {
	t.Helper()
	var r codeModeResult
	require.NoError(t, json.Unmarshal(raw, &r), string(raw))
	return r
}

func (b *bundle) wait(t *testing.T, session, runID string) *contracts.Event {
	t.Helper()
	data, _ := json.Marshal(map[string]string{"runId": runID})
	job, err := b.prod.Submit(testutil.Context(t, 5*time.Second), contracts.ToolCodeModeWait, data, &producer.SubmitOpts{Session: session})
	require.NoError(t, err)
	return b.await(t, job, false)
}

func TestAutoResumeCompletes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", nil, nil)
	job := b.exec(t, `const r = await tools.callValue("toolq:core:noop", {x: 21}); text("got " + r.x); return r.x * 2;`,
		map[string]any{"autoResume": true}, nil)
	first := b.await(t, job, true)
	require.Equal(t, contracts.StatusWaiting, first.Data.Status)
	w := result(t, first.Data.Result)
	require.Equal(t, "waiting", w.Status)
	require.Equal(t, job.ID, w.RunID)
	require.Equal(t, "pending_tools", w.Reason)
	require.Len(t, w.PendingToolCalls, 1)

	final := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, final.Data.Status, string(final.Data.Result))
	r := result(t, final.Data.Result)
	require.Equal(t, "completed", r.Status)
	require.JSONEq(t, `42`, string(r.Value))
	require.Equal(t, 1, r.Telemetry.Resumes)
	require.Equal(t, 1, r.Telemetry.NestedCalls)
	require.Positive(t, r.Telemetry.SuspendedMs)
	require.Len(t, r.Output, 1)
}

func TestWaitResumesOnAnotherWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	slow := func(w *worker.Worker) {
		require.NoError(t, w.Register("slow_echo", worker.HandlerFunc(func(ctx context.Context, j *contracts.Job) (json.RawMessage, error) {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return j.Input, nil
		}), &worker.ToolConfig{Catalog: &contracts.CatalogTool{Description: "Echo, slowly."}}))
	}
	a := b.startWorker(t, "A", nil, slow)
	job := b.exec(t, `
		const [a, c] = await Promise.all([
			tools.callValue("toolq:core:slow_echo", {n: 1}),
			tools.callValue("toolq:core:noop", {n: 2}),
		]);
		return a.n + c.n;`, nil, nil)
	first := b.await(t, job, true)
	require.Equal(t, contracts.StatusWaiting, first.Data.Status)
	// The exec answered waiting before the slow nested call completed.
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	close(release)
	require.NoError(t, a.Stop(stopCtx))

	b.startWorker(t, "B", nil, nil)
	ev := b.wait(t, job.Session, job.ID)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	r := result(t, ev.Data.Result)
	require.Equal(t, "completed", r.Status)
	require.JSONEq(t, `3`, string(r.Value))
	final := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, final.Data.Status)
	require.Contains(t, final.Source, "/B")
}

func TestWaitRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", nil, nil)
	ev := b.wait(t, "s1", "no-such-run")
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeInvalidInput, ev.Data.Error.Code)
	require.Equal(t, "code mode run is unavailable or expired.", ev.Data.Error.Message)

	// A run waiting on a client tool nobody answers.
	job := b.exec(t, `return await tools.callValue("toolq:core:sleep", {ms: 60000});`, nil, nil)
	require.Equal(t, contracts.StatusWaiting, b.await(t, job, true).Data.Status)
	ev = b.wait(t, "other-session", job.ID)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, "code mode run belongs to a different session.", ev.Data.Error.Message)
	require.NoError(t, b.prod.Cancel(testutil.Context(t, 5*time.Second), job.Session, job.ID))
}

func TestDeniedToolUnreachable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", &codemode.Config{Deny: []string{"toolq:core:sleep"}}, nil)
	job := b.exec(t, `
		const ids = ALL_TOOLS.map(t => t.id);
		let err = "";
		try { await tools.call("toolq:core:sleep", {ms: 1}); } catch (e) { err = String(e.message); }
		return {ids, err};`, nil, nil)
	ev := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	var v struct {
		IDs []string `json:"ids"`
		Err string   `json:"err"`
	}
	require.NoError(t, json.Unmarshal(result(t, ev.Data.Result).Value, &v))
	require.Contains(t, v.IDs, "toolq:core:noop")
	require.NotContains(t, v.IDs, "toolq:core:sleep")
	require.NotEmpty(t, v.Err)
	for _, id := range v.IDs {
		require.NotContains(t, id, "code_mode")
	}
}

func TestExpiredRunFailsAndCleansUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", nil, nil)
	job := b.exec(t, `return await tools.callValue("toolq:core:sleep", {ms: 60000});`,
		map[string]any{"limits": map[string]any{"snapshotTtlSeconds": 1}}, nil)
	require.Equal(t, contracts.StatusWaiting, b.await(t, job, true).Data.Status)
	ev := b.await(t, job, false)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeTimeout, ev.Data.Error.Code)
	require.Contains(t, ev.Data.Error.Message, "expired")
	nc := b.srv.Connect(t)
	requireNoRun(t, nc, job.Session, job.ID)
}

// storedRun is a run's record as the runs bucket holds it, for tests that
// rewrite it as another writer would.
type storedRun struct {
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	entry jetstream.KeyValueEntry
	rec   map[string]any
}

// readRun reads the record of job's run (of the default tenant).
func (b *bundle) readRun(ctx context.Context, t *testing.T, job *contracts.Job) *storedRun {
	t.Helper()
	js := testutil.JetStream(t, b.srv.Connect(t))
	kv, err := js.KeyValue(ctx, "toolq_runs")
	require.NoError(t, err)
	e, err := kv.Get(ctx, job.Session+"."+job.ID)
	require.NoError(t, err)
	r := &storedRun{js: js, kv: kv, entry: e}
	require.NoError(t, json.Unmarshal(e.Value(), &r.rec))
	return r
}

// update writes the record back, changed, at the revision it was read.
func (r *storedRun) update(ctx context.Context, t *testing.T) {
	t.Helper()
	data, err := json.Marshal(r.rec)
	require.NoError(t, err)
	_, err = r.kv.Update(ctx, r.entry.Key(), data, r.entry.Revision())
	require.NoError(t, err)
}

func requireNoRun(t *testing.T, nc *nats.Conn, session, runID string) {
	t.Helper()
	js := testutil.JetStream(t, nc)
	ctx := testutil.Context(t, 10*time.Second)
	kv, err := js.KeyValue(ctx, "toolq_runs")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := kv.Get(ctx, session+"."+runID)
		return err != nil
	}, 10*time.Second, 50*time.Millisecond)
}

func TestCancelWaitingRunCleansUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", nil, nil)
	job := b.exec(t, `return await tools.callValue("toolq:core:sleep", {ms: 60000});`, nil, nil)
	require.Equal(t, contracts.StatusWaiting, b.await(t, job, true).Data.Status)
	require.NoError(t, b.prod.Cancel(testutil.Context(t, 5*time.Second), job.Session, job.ID))
	require.Equal(t, contracts.StatusCancelled, b.await(t, job, false).Data.Status)
	requireNoRun(t, b.srv.Connect(t), job.Session, job.ID)
	// The nested sleep was cancelled too.
	nested := job.ID + "-call_1"
	ev, err := b.prod.Await(testutil.Context(t, 10*time.Second), job.Session, nested, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCancelled, ev.Data.Status)
}

// damageSnapshot overwrites a waiting run's inline snapshot with garbage, as
// if it had been made by another engine build or lost its bytes.
func damageSnapshot(t *testing.T, b *bundle, session, runID string) {
	t.Helper()
	js := testutil.JetStream(t, b.srv.Connect(t))
	ctx := testutil.Context(t, 10*time.Second)
	kv, err := js.KeyValue(ctx, "toolq_runs")
	require.NoError(t, err)
	// The run's own writes (nested results coming back) may race with
	// ours: retry on a revision conflict.
	require.Eventually(t, func() bool {
		e, err := kv.Get(ctx, session+"."+runID)
		require.NoError(t, err)
		var rec map[string]any
		require.NoError(t, json.Unmarshal(e.Value(), &rec))
		require.NotEmpty(t, rec["snapshot"], "the snapshot is inline")
		rec["snapshot"] = []byte("TQSNAP-not-a-real-snapshot")
		data, err := json.Marshal(rec)
		require.NoError(t, err)
		_, err = kv.Update(ctx, session+"."+runID, data, e.Revision())
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
}

func TestRestartSafeRunRebuiltByReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", nil, nil)
	job := b.exec(t, `
		const a = await tools.callValue("toolq:core:noop", {n: 1});
		text("after first");
		const c = await tools.callValue("toolq:core:noop", {n: a.n + 10});
		return c.n * 2;`, map[string]any{"restartSafe": true}, nil)
	require.Equal(t, contracts.StatusWaiting, b.await(t, job, true).Data.Status)
	// First wait: resumes normally and waits again on the second call.
	ev := b.wait(t, job.Session, job.ID)
	if result(t, ev.Data.Result).Status != "waiting" {
		_ = b.prod.ReadEvents(testutil.Context(t, 5*time.Second), job.Session, nil, func(e *contracts.Event) error {
			t.Logf("EVENT %s %s %s %s", e.Data.JobID, e.Data.Status, e.Source, e.Data.Result)
			return nil
		})
	}
	require.Equal(t, "waiting", result(t, ev.Data.Result).Status)
	damageSnapshot(t, b, job.Session, job.ID)
	ev = b.wait(t, job.Session, job.ID)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	r := result(t, ev.Data.Result)
	require.Equal(t, "completed", r.Status)
	require.JSONEq(t, `22`, string(r.Value))
}

func TestDamagedSnapshotFailsRunThatIsNotRestartSafe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", nil, nil)
	job := b.exec(t, `return (await tools.callValue("toolq:core:noop", {n: 1})).n;`, nil, nil)
	require.Equal(t, contracts.StatusWaiting, b.await(t, job, true).Data.Status)
	damageSnapshot(t, b, job.Session, job.ID)
	ev := b.wait(t, job.Session, job.ID)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeInternalError, ev.Data.Error.Code)
	final := b.await(t, job, false)
	require.Equal(t, contracts.StatusFailed, final.Data.Status)
	requireNoRun(t, b.srv.Connect(t), job.Session, job.ID)
}

func TestRestartSafeRefusesSideEffects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ran sync.Mutex
	calls := 0
	b.startWorker(t, "A", nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("send_mail", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			ran.Lock()
			calls++
			ran.Unlock()
			return json.RawMessage(`"sent"`), nil
		}), &worker.ToolConfig{Catalog: &contracts.CatalogTool{Description: "Send mail.", SideEffects: true}}))
	})
	job := b.exec(t, `try { await tools.callValue("toolq:core:send_mail", {to: "x"}); return "sent"; } catch (e) { return "refused: " + e.message; }`,
		map[string]any{"restartSafe": true}, nil)
	ev := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	require.Contains(t, string(result(t, ev.Data.Result).Value), "refused in a restartSafe run")
	ran.Lock()
	defer ran.Unlock()
	require.Equal(t, 0, calls)
}

func TestLeaseOfDeadWorkerIsTakenOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "B", &codemode.Config{LeaseTTL: 600 * time.Millisecond}, nil)
	job := b.exec(t, `return (await tools.callValue("toolq:core:noop", {n: 5})).n;`, nil, nil)
	require.Equal(t, contracts.StatusWaiting, b.await(t, job, true).Data.Status)
	// A worker "A" took the resume lease and died: the record says
	// resuming, held by A for a little longer.
	js := testutil.JetStream(t, b.srv.Connect(t))
	ctx := testutil.Context(t, 10*time.Second)
	kv, err := js.KeyValue(ctx, "toolq_runs")
	require.NoError(t, err)
	key := job.Session + "." + job.ID
	require.Eventually(t, func() bool {
		e, err := kv.Get(ctx, key)
		require.NoError(t, err)
		var rec map[string]any
		require.NoError(t, json.Unmarshal(e.Value(), &rec))
		if rec["results"] == nil {
			return false // the nested result is not back yet
		}
		rec["status"] = "resuming"
		rec["lease"] = map[string]any{"owner": "A", "until": time.Now().Add(time.Second)}
		data, _ := json.Marshal(rec)
		_, err = kv.Update(ctx, key, data, e.Revision())
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	start := time.Now()
	ev := b.wait(t, job.Session, job.ID)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	require.JSONEq(t, `5`, string(result(t, ev.Data.Result).Value))
	require.GreaterOrEqual(t, time.Since(start), 500*time.Millisecond, "B waited for A's lease to run out")
	final := b.await(t, job, false)
	require.Contains(t, final.Source, "/B")
}

func TestClientToolAnsweredByRequester(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", nil, nil)
	ctx := testutil.Context(t, 10*time.Second)
	require.NoError(t, b.prod.RegisterClientTool(ctx, contracts.CatalogTool{
		ID: "client:app:select_file", Name: "select_file", Description: "Ask the user to pick a file.",
	}))
	job := b.exec(t, `
		const seen = ALL_TOOLS.some(t => t.id === "client:app:select_file" && t.source === "client");
		const f = await tools.callValue("client:app:select_file", {prompt: "pick"});
		return {seen, f};`, map[string]any{"autoResume": true}, nil)
	ev := b.await(t, job, true)
	require.Equal(t, contracts.StatusWaiting, ev.Data.Status)
	var w contracts.CodeModeResult
	require.NoError(t, json.Unmarshal(ev.Data.Result, &w))
	require.Len(t, w.PendingToolCalls, 1)
	p := w.PendingToolCalls[0]
	require.Equal(t, "client:app:select_file", p.ToolID)
	require.Equal(t, "client", p.Source)
	require.JSONEq(t, `{"prompt":"pick"}`, string(p.Input))
	require.NotEmpty(t, p.Token, "the requester gets the token of the call it answers")

	// A result for a call of another session's run is not taken; nor one
	// without the call's token (the same call id, guessed).
	require.NoError(t, b.prod.SubmitToolResult(ctx, "intruder", job.ID, p, json.RawMessage(`"evil.txt"`), nil))
	guessed := contracts.CodeModePendingToolCall{CallID: p.CallID}
	require.NoError(t, b.prod.SubmitToolResult(ctx, job.Session, job.ID, guessed, json.RawMessage(`"forged.txt"`), nil))
	forged := b.await(t, &contracts.Job{ID: clientResultID(job.Session, job.ID, guessed), Session: job.Session}, false)
	require.Equal(t, contracts.StatusFailed, forged.Data.Status)
	require.Equal(t, contracts.CodeInvalidInput, forged.Data.Error.Code)
	require.Contains(t, forged.Data.Error.Message, "token")
	require.NoError(t, b.prod.SubmitToolResult(ctx, job.Session, job.ID, p, json.RawMessage(`"notes.txt"`), nil))
	final := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, final.Data.Status, string(final.Data.Result))
	require.JSONEq(t, `{"seen":true,"f":"notes.txt"}`, string(result(t, final.Data.Result).Value))
	require.ErrorIs(t, b.prod.SubmitToolResult(ctx, job.Session, "bad id", p, nil, nil), contracts.ErrInvalidInput)
}

// clientResultID is the id SubmitToolResult gives an answer.
func clientResultID(session, runID string, call contracts.CodeModePendingToolCall) string {
	sum := sha256.Sum256([]byte(session + "\x00" + runID + "\x00" + call.CallID + "\x00" + call.Token))
	return "client-" + hex.EncodeToString(sum[:16])
}

func TestOutputSchemaEnforcedAndTraceCarried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	traces := make(chan string, 4)
	b.startWorker(t, "A", nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("shipments", worker.HandlerFunc(func(ctx context.Context, j *contracts.Job) (json.RawMessage, error) {
			traces <- worker.TraceParent(ctx)
			var in struct{ Bad bool }
			_ = json.Unmarshal(j.Input, &in)
			if in.Bad {
				return json.RawMessage(`[{"id":"s1","paid":"yes"}]`), nil
			}
			return json.RawMessage(`[{"id":"s1","paid":false,"tons":12}]`), nil
		}), &worker.ToolConfig{Catalog: &contracts.CatalogTool{
			Description:  "List shipments.",
			OutputSchema: json.RawMessage(`{"type":"array","items":{"type":"object","properties":{"id":{"type":"string"},"paid":{"type":"boolean"},"tons":{"type":"number"}},"required":["id","paid","tons"],"additionalProperties":false}}`),
		}}))
	})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	job := b.exec(t, `
		const good = await tools.callValue("toolq:core:shipments", {});
		let bad = "";
		try { await tools.callValue("toolq:core:shipments", {bad: true}); } catch (e) { bad = e.message; }
		return {good: good.filter(s => !s.paid && s.tons > 10).length, bad};`,
		map[string]any{"autoResume": true}, &producer.SubmitOpts{TraceParent: tp})
	final := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, final.Data.Status, string(final.Data.Result))
	var v struct {
		Good int    `json:"good"`
		Bad  string `json:"bad"`
	}
	require.NoError(t, json.Unmarshal(result(t, final.Data.Result).Value, &v))
	require.Equal(t, 1, v.Good)
	require.Contains(t, v.Bad, "does not match its declared output schema")
	require.Equal(t, tp, <-traces)
	require.Equal(t, tp, <-traces)

	// Nested calls are visible under their parent run in the session's events.
	var nested []*contracts.Event
	require.NoError(t, b.prod.ReadEvents(testutil.Context(t, 10*time.Second), job.Session, nil, func(ev *contracts.Event) error {
		if ev.Data.Parent != nil && ev.Data.Status.Terminal() {
			nested = append(nested, ev)
		}
		return nil
	}))
	require.Len(t, nested, 2)
	for _, ev := range nested {
		require.Equal(t, job.ID, ev.Data.Parent.RunID)
		require.Equal(t, "shipments", ev.Data.Tool)
	}
}

func TestLargeSnapshotGoesToObjectStore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", &codemode.Config{InlineSnapshotBytes: 1024}, nil)
	job := b.exec(t, `
		const big = [];
		for (let i = 0; i < 20000; i++) big.push({i, s: "item-" + i * 7919});
		const r = await tools.callValue("toolq:core:noop", {n: 3});
		return big.length + r.n + big[12345].s.length;`, map[string]any{"autoResume": true}, nil)
	first := b.await(t, job, true)
	require.Equal(t, contracts.StatusWaiting, first.Data.Status)
	var w struct {
		Telemetry struct {
			SnapshotBytes int `json:"snapshotBytes"`
		} `json:"telemetry"`
	}
	require.NoError(t, json.Unmarshal(first.Data.Result, &w))
	require.Greater(t, w.Telemetry.SnapshotBytes, 1024)
	final := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, final.Data.Status, string(final.Data.Result))
	require.JSONEq(t, fmt.Sprint(20000+3+len("item-97764255")), string(result(t, final.Data.Result).Value))
	// The object is gone with the run.
	js := testutil.JetStream(t, b.srv.Connect(t))
	ctx := testutil.Context(t, 10*time.Second)
	obj, err := js.ObjectStore(ctx, "toolq_snapshots")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := obj.GetInfo(ctx, job.Session+"."+job.ID)
		return err != nil
	}, 10*time.Second, 50*time.Millisecond)
}

func TestSnapshotLimitFailsTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", nil, nil)
	job := b.exec(t, `
		const big = [];
		for (let i = 0; i < 50000; i++) big.push("x" + i);
		return (await tools.callValue("toolq:core:noop", {n: 1})).n + big.length;`,
		map[string]any{"limits": map[string]any{"maxSnapshotBytes": 4096}}, nil)
	ev := b.await(t, job, false)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeSnapshotLimitExceeded, ev.Data.Error.Code)
	requireNoRun(t, b.srv.Connect(t), job.Session, job.ID)
}

func TestDirectOnlyAndJobToolListNarrowTheCatalog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("screenshot", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			return json.RawMessage(`"png"`), nil
		}), &worker.ToolConfig{Catalog: &contracts.CatalogTool{Description: "Take a screenshot.", DirectOnly: true}}))
	})
	code := `
		const ids = ALL_TOOLS.map(t => t.id).sort();
		let err = "";
		try { await tools.callValue("toolq:core:screenshot", {}); } catch (e) { err = e.message; }
		return {ids, err};`
	var v struct {
		IDs []string `json:"ids"`
		Err string   `json:"err"`
	}
	ev := b.await(t, b.exec(t, code, nil, nil), false)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	require.NoError(t, json.Unmarshal(result(t, ev.Data.Result).Value, &v))
	require.NotContains(t, v.IDs, "toolq:core:screenshot")
	require.Contains(t, v.IDs, "toolq:core:sleep")
	require.NotEmpty(t, v.Err)

	// A job's own tools list narrows what the run sees.
	ev = b.await(t, b.exec(t, code, map[string]any{"tools": []string{"toolq:core:noop"}}, nil), false)
	require.NoError(t, json.Unmarshal(result(t, ev.Data.Result).Value, &v))
	require.Equal(t, []string{"toolq:core:noop"}, v.IDs)
}

// TestGuestFailureIsTheGuests: a run whose own code throws fails with
// guest_error (not internal_error, which says toolq broke), the guest's
// message and its stack at the guest's line and column; the result inside
// keeps the code-mode contract's shape (no code: the failure is the guest's).
func TestGuestFailureIsTheGuests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", nil, nil)
	tests := []struct {
		name, code string
		extra      map[string]any
		want       string
	}{
		{"throw", "const a = 1;\nthrow new Error('boom')", nil, "Error: boom\n    at <anonymous> (code.js:2:11)"},
		{"thrown string", "throw 'x'", nil, "x"},
		{"reference error", "return nope", nil, "ReferenceError: nope is not defined\n    at <anonymous> (code.js:1:8)"},
		{
			"after a resume", "const r = await tools.callValue('toolq:core:noop', {n: 1});\n\nthrow new TypeError('late ' + r.n)",
			map[string]any{"autoResume": true, "language": "typescript"},
			"TypeError: late 1\n    at <anonymous> (code.ts:3:",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := b.exec(t, tt.code, tt.extra, nil)
			ev := b.await(t, job, false)
			require.Equal(t, contracts.StatusFailed, ev.Data.Status)
			require.NotNil(t, ev.Data.Error)
			require.Equal(t, contracts.CodeGuestError, ev.Data.Error.Code)
			require.Contains(t, ev.Data.Error.Message, tt.want)
			r := result(t, ev.Data.Error.Details)
			require.Equal(t, "failed", r.Status)
			require.Empty(t, r.Code)
			require.Contains(t, r.Error, tt.want)
			var res contracts.CodeModeResult
			require.NoError(t, json.Unmarshal(ev.Data.Error.Details, &res))
			require.ErrorIs(t, res.Err(), contracts.ErrGuestError)
		})
	}
}
