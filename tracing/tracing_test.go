package tracing_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/scheduler"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/tools/codemode"
	"github.com/toolq/toolq/tools/shellexec"
	"github.com/toolq/toolq/tracing"
	"github.com/toolq/toolq/tracing/otlptest"
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

// node is an in-process server, a producer and a worker with code mode
// and exec whose spans go to rec (nil: tracing off).
type node struct {
	srv  *testutil.Server
	prod *producer.Producer
	w    *worker.Worker
}

func start(t *testing.T, tr worker.Tracer, approver string, register ...func(w *worker.Worker)) *node {
	t.Helper()
	srv := testutil.StartJetStream(t)
	prod, err := producer.New(srv.Connect(t), &producer.Config{Session: "s1", Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	nc := srv.Connect(t)
	w, err := worker.New(nc, &worker.Config{Name: "A", Logger: quiet, StopTimeout: time.Second, Builtins: true, Tracer: tr})
	require.NoError(t, err)
	_, err = codemode.Register(w, nc, &codemode.Config{Engine: sharedEngine(t), Logger: quiet, ShellExec: true})
	require.NoError(t, err)
	_, err = shellexec.Register(w, srv.Connect(t), &shellexec.Config{
		Policy:    shell.Policy{Security: shell.SecurityAllowlist, Ask: shell.AskOnMiss, Allowlist: []string{"/usr/bin/echo"}},
		Runner:    shell.RunnerConfig{ScratchDir: t.TempDir()},
		Approvers: []string{approver}, Logger: quiet,
	})
	require.NoError(t, err)
	for _, r := range register {
		r(w)
	}
	require.NoError(t, w.Start(testutil.Context(t, 20*time.Second)))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(sctx))
	})
	return &node{srv: srv, prod: prod, w: w}
}

func recorder(t *testing.T) (*tracing.Tracer, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tr, err := tracing.New(context.Background(), &tracing.Config{Processor: rec, SampleRatio: 1})
	require.NoError(t, err)
	require.NotNil(t, tr)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr, rec
}

// spans polls rec until every name in want has ended at least as often as
// want says, and returns the ended spans by name.
func spans(t *testing.T, rec *tracetest.SpanRecorder, want map[string]int) map[string][]sdktrace.ReadOnlySpan {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		by := map[string][]sdktrace.ReadOnlySpan{}
		for _, s := range rec.Ended() {
			by[s.Name()] = append(by[s.Name()], s)
		}
		ok := true
		for name, n := range want {
			if len(by[name]) < n {
				ok = false
			}
		}
		if ok {
			return by
		}
		if time.Now().After(deadline) {
			names := map[string]int{}
			for n, s := range by {
				names[n] = len(s)
			}
			t.Fatalf("spans: want %v, have %v", want, names)
		}
		time.Sleep(10 * time.Millisecond) // polling the recorder the workers write to
	}
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value
		}
	}
	return attribute.Value{}
}

func byAttr(t *testing.T, ss []sdktrace.ReadOnlySpan, key, value string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range ss {
		if attr(s, key).AsString() == value {
			return s
		}
	}
	t.Fatalf("no span with %s=%s", key, value)
	return nil
}

func childOf(t *testing.T, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	require.Equal(t, parent.SpanContext().TraceID(), child.SpanContext().TraceID(), "%s in another trace than %s", child.Name(), parent.Name())
	require.Equal(t, parent.SpanContext().SpanID(), child.Parent().SpanID(), "%s is not a child of %s", child.Name(), parent.Name())
}

func newApprover(t *testing.T) (seed []byte, pub string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err = kp.Seed()
	require.NoError(t, err)
	pub, err = kp.PublicKey()
	require.NoError(t, err)
	return seed, pub
}

const requesterTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// A code-mode run that calls a tool, suspends, resumes, calls another and
// completes is one trace, the requester's: the exec job's span is a child
// of the requester's span; each nested call's job, each report of a call's
// end, each suspension and each resume is in it, under the span that made
// the call; the second call was made by the resume, so it is the resume's
// child.
func TestCodeModeRunIsOneTrace(t *testing.T) {
	t.Parallel()
	_, pub := newApprover(t)
	tr, rec := recorder(t)
	n := start(t, tr, pub)
	ctx := testutil.Context(t, 30*time.Second)
	in, _ := json.Marshal(map[string]any{
		"code":       `const a = await tools.callValue("toolq:core:noop", {x: 1}); const b = await tools.callValue("toolq:core:noop", {x: 2}); return a.x + b.x;`,
		"autoResume": true,
	})
	job, err := n.prod.Submit(ctx, contracts.ToolCodeModeExec, in, &producer.SubmitOpts{TraceParent: requesterTP})
	require.NoError(t, err)
	ev, err := n.prod.Await(ctx, job.Session, job.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))

	by := spans(t, rec, map[string]int{
		"toolq.job code_mode.exec": 1, "toolq.job noop": 2, "toolq.job code_mode.result": 2,
		"code_mode.suspended": 2, "code_mode.resume": 2,
	})
	all := rec.Ended()
	want, err := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	require.NoError(t, err)
	for _, s := range all {
		require.Equal(t, want, s.SpanContext().TraceID(), "span %s in another trace", s.Name())
	}
	exec := by["toolq.job code_mode.exec"][0]
	require.Equal(t, "00f067aa0ba902b7", exec.Parent().SpanID().String())
	require.True(t, exec.Parent().IsRemote())
	require.Equal(t, trace.SpanKindConsumer, exec.SpanKind())
	require.Equal(t, job.ID, attr(exec, worker.AttrJobID).AsString())
	require.Equal(t, "parked", attr(exec, tracing.AttrOutcome).AsString())
	require.Equal(t, int64(1), attr(exec, worker.AttrAttempt).AsInt64())
	require.Equal(t, contracts.ToolCodeModeExec, attr(exec, worker.AttrTool).AsString())

	// The first call was made by the exec, the second by the first resume.
	first := byAttr(t, by["toolq.job noop"], worker.AttrJobID, job.ID+"-call_1")
	second := byAttr(t, by["toolq.job noop"], worker.AttrJobID, job.ID+"-call_2")
	childOf(t, first, exec)
	require.Equal(t, "completed", attr(first, tracing.AttrOutcome).AsString())
	require.Equal(t, job.ID, attr(first, worker.AttrParentRun).AsString())
	resumes := by["code_mode.resume"]
	for _, r := range resumes {
		childOf(t, r, exec)
		require.Equal(t, job.ID, attr(r, "toolq.code_mode.run_id").AsString())
		require.Len(t, r.Links(), 1, "a resume links the job that triggered it")
	}
	// The resume of step 1 that ran (another worker's try while it held
	// the run would end "busy").
	var firstResume sdktrace.ReadOnlySpan
	for _, r := range resumes {
		if attr(r, "toolq.code_mode.step").AsInt64() == 1 && attr(r, tracing.AttrOutcome).AsString() == "waiting" {
			firstResume = r
		}
	}
	require.NotNil(t, firstResume, "the first resume suspended the run again")
	childOf(t, second, firstResume)
	// Each report of a call's end is in the trace too, under the span that
	// made the call, and is the job each resume links.
	reports := by["toolq.job code_mode.result"]
	childOf(t, byAttr(t, reports, worker.AttrJobID, contracts.ToolResultJobID(job.ID+"-call_1")), exec)
	childOf(t, byAttr(t, reports, worker.AttrJobID, contracts.ToolResultJobID(job.ID+"-call_2")), firstResume)
	linked := map[trace.SpanID]bool{}
	for _, r := range resumes {
		linked[r.Links()[0].SpanContext.SpanID()] = true
	}
	for _, r := range reports {
		require.True(t, linked[r.SpanContext().SpanID()], "a report's span is linked from a resume")
	}
	// The suspensions last from the suspend to the resume.
	for _, s := range by["code_mode.suspended"] {
		childOf(t, s, exec)
		require.False(t, s.EndTime().Before(s.StartTime()))
	}
	// No span carries the job's input.
	for _, s := range all {
		for _, a := range s.Attributes() {
			require.NotContains(t, a.Value.String(), "callValue", "span %s attribute %s", s.Name(), a.Key)
		}
	}
}

// A job submitted without a traceparent starts a trace of its own, and its
// nested calls are in it.
func TestJobWithoutTraceParentStartsATrace(t *testing.T) {
	t.Parallel()
	_, pub := newApprover(t)
	tr, rec := recorder(t)
	n := start(t, tr, pub)
	ctx := testutil.Context(t, 30*time.Second)
	in, _ := json.Marshal(map[string]any{"code": `return (await tools.callValue("toolq:core:noop", {x: 1})).x;`, "autoResume": true})
	job, err := n.prod.Submit(ctx, contracts.ToolCodeModeExec, in, nil)
	require.NoError(t, err)
	ev, err := n.prod.Await(ctx, job.Session, job.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	// A traceparent that does not parse is no parent either.
	bad, err := n.prod.Submit(ctx, worker.ToolNoop, json.RawMessage(`{}`), &producer.SubmitOpts{TraceParent: "00-not-a-trace-01"})
	require.NoError(t, err)
	_, err = n.prod.Await(ctx, bad.Session, bad.ID, nil)
	require.NoError(t, err)

	by := spans(t, rec, map[string]int{"toolq.job code_mode.exec": 1, "toolq.job noop": 2, "code_mode.resume": 1})
	exec := by["toolq.job code_mode.exec"][0]
	require.False(t, exec.Parent().IsValid(), "a job without a traceparent is a trace's root")
	childOf(t, byAttr(t, by["toolq.job noop"], worker.AttrJobID, job.ID+"-call_1"), exec)
	badSpan := byAttr(t, by["toolq.job noop"], worker.AttrJobID, bad.ID)
	require.False(t, badSpan.Parent().IsValid())
	require.NotEqual(t, exec.SpanContext().TraceID(), badSpan.SpanContext().TraceID())
}

// An exec that waits for a person shows the wait: a span from
// approval_pending to the decision, in the exec job's trace, and one of
// carrying the decision out (the command run).
func TestExecApprovalWaitIsASpan(t *testing.T) {
	t.Parallel()
	seed, pub := newApprover(t)
	tr, rec := recorder(t)
	n := start(t, tr, pub)
	ctx := testutil.Context(t, 30*time.Second)
	job, err := n.prod.Submit(ctx, contracts.ToolExec, json.RawMessage(`{"command":"uname -s"}`), &producer.SubmitOpts{TraceParent: requesterTP})
	require.NoError(t, err)
	ev, err := n.prod.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
	require.NoError(t, err)
	require.Equal(t, contracts.StatusApprovalPending, ev.Data.Status)
	pending := time.Now()
	// The wait is a span once decided, not before.
	by := spans(t, rec, map[string]int{"toolq.job exec": 1})
	require.Empty(t, by["exec.approval_wait"])
	time.Sleep(50 * time.Millisecond) // a wait long enough to see in the span
	decide, _, err := shellexec.Decide(ctx, n.prod, job.ID, shell.Approve, seed, nil)
	require.NoError(t, err)
	ev, err = n.prod.Await(ctx, job.Session, job.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))

	by = spans(t, rec, map[string]int{"toolq.job exec": 1, "exec.approval_wait": 1, "exec.apply": 1, "toolq.job exec.decide": 1})
	execSpan := by["toolq.job exec"][0]
	require.Equal(t, "parked", attr(execSpan, tracing.AttrOutcome).AsString())
	wait := by["exec.approval_wait"][0]
	childOf(t, wait, execSpan)
	require.Equal(t, "approved", attr(wait, tracing.AttrOutcome).AsString())
	require.Equal(t, job.ID, attr(wait, "toolq.exec.approval_id").AsString())
	require.False(t, wait.StartTime().After(pending), "the wait starts at approval_pending")
	require.GreaterOrEqual(t, wait.EndTime().Sub(wait.StartTime()), 50*time.Millisecond)
	apply := by["exec.apply"][0]
	childOf(t, apply, execSpan)
	// The decision came in a job of its own trace (the approver sent no
	// traceparent): the wait and the run link it.
	decideSpan := byAttr(t, by["toolq.job exec.decide"], worker.AttrJobID, decide.ID)
	require.Len(t, wait.Links(), 1)
	require.Equal(t, decideSpan.SpanContext().SpanID(), wait.Links()[0].SpanContext.SpanID())
	require.Equal(t, decideSpan.SpanContext().SpanID(), apply.Links()[0].SpanContext.SpanID())
}

// Tracing off is a worker without a Tracer: no span, and the spans it
// would start cost no allocation. A job's traceparent still reaches its
// handler as it came.
func TestTracingOff(t *testing.T) {
	// Not parallel: it clears the OTLP variables.
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"} {
		t.Setenv(v, "")
	}
	tr, err := tracing.New(context.Background(), &tracing.Config{})
	require.NoError(t, err)
	require.Nil(t, tr, "no endpoint: no tracer")
	_, pub := newApprover(t)
	seen := make(chan string, 1)
	n := start(t, nil, pub, func(w *worker.Worker) {
		require.NoError(t, w.Register("probe", worker.HandlerFunc(func(ctx context.Context, _ *contracts.Job) (json.RawMessage, error) {
			seen <- worker.TraceParent(ctx)
			return json.RawMessage(`null`), nil
		}), nil))
	})
	require.False(t, n.w.Tracing())
	allocs := testing.AllocsPerRun(100, func() {
		n.w.StartSpan(worker.SpanStart{Name: "x"}).End("completed", "")
	})
	require.Zero(t, allocs)
	ctx := testutil.Context(t, 20*time.Second)
	job, err := n.prod.Submit(ctx, "probe", json.RawMessage(`{}`), &producer.SubmitOpts{TraceParent: requesterTP})
	require.NoError(t, err)
	_, err = n.prod.Await(ctx, job.Session, job.ID, nil)
	require.NoError(t, err)
	require.Equal(t, requesterTP, <-seen)

	// The endpoint variables turn it on; OTEL_SDK_DISABLED turns it off.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	require.True(t, tracing.Enabled(&tracing.Config{}))
	t.Setenv("OTEL_SDK_DISABLED", "true")
	require.False(t, tracing.Enabled(&tracing.Config{Endpoint: "127.0.0.1:4318"}))
}

// A ratio of 0 records nothing, yet a job's handler still gets a
// traceparent that says so (not sampled), so the trace stays one.
func TestSampleRatioZero(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tr, err := tracing.New(context.Background(), &tracing.Config{Processor: rec, SampleRatio: 0})
	require.NoError(t, err)
	s := tr.Start(worker.SpanStart{Name: "x", Parent: requesterTP})
	tp := s.TraceParent()
	s.End("completed", "")
	require.Empty(t, rec.Ended())
	require.Regexp(t, `^00-4bf92f3577b34da6a3ce929d0e0e4736-[0-9a-f]{16}-00$`, tp)
	_, err = tracing.New(context.Background(), &tracing.Config{Processor: rec, SampleRatio: 2})
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
}

// The OTLP/HTTP exporter sends the spans to the endpoint as a collector
// takes them: a job's span with its attributes, under service.name toolq.
func TestOTLPHTTPExport(t *testing.T) {
	t.Parallel()
	recv := otlptest.New(true)
	t.Cleanup(recv.Close)
	tr, err := tracing.New(context.Background(), &tracing.Config{Endpoint: recv.URL(), Protocol: tracing.ProtocolHTTP, SampleRatio: 1})
	require.NoError(t, err)
	_, pub := newApprover(t)
	n := start(t, tr, pub)
	ctx := testutil.Context(t, 20*time.Second)
	job, err := n.prod.Submit(ctx, worker.ToolNoop, json.RawMessage(`{"secret":"hunter2"}`), &producer.SubmitOpts{TraceParent: requesterTP})
	require.NoError(t, err)
	_, err = n.prod.Await(ctx, job.Session, job.ID, nil)
	require.NoError(t, err)
	// The span ends just after the job's event: flush until it is there.
	var got *otlptest.Span
	for got == nil {
		require.NoError(t, tr.ForceFlush(ctx))
		for _, s := range recv.Spans() {
			if otlptest.Attr(s.Span, worker.AttrJobID) == job.ID {
				got = &s
			}
		}
		require.NoError(t, ctx.Err(), "the job's span did not reach the receiver")
		if got == nil {
			time.Sleep(10 * time.Millisecond) // polling the worker's span's end
		}
	}
	require.NoError(t, tr.Shutdown(ctx))
	require.Equal(t, "toolq", got.Service)
	require.Equal(t, "toolq.job noop", got.Span.GetName())
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", hex.EncodeToString(got.Span.GetTraceId()))
	require.Equal(t, "00f067aa0ba902b7", hex.EncodeToString(got.Span.GetParentSpanId()))
	require.Equal(t, "completed", otlptest.Attr(got.Span, tracing.AttrOutcome))
	require.Equal(t, worker.ToolNoop, otlptest.Attr(got.Span, worker.AttrTool))
	require.Zero(t, recv.Bad())
	for _, s := range recv.Spans() {
		for _, a := range s.Span.GetAttributes() {
			require.NotContains(t, a.GetValue().String(), "hunter2")
		}
	}
	// A bad endpoint is refused up front.
	_, err = tracing.New(ctx, &tracing.Config{Endpoint: "ftp://x"})
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
	_, err = tracing.New(ctx, &tracing.Config{Endpoint: "127.0.0.1:1", Protocol: "thrift"})
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
}

// A scheduled job's trace begins at its firing: the job's span is a child
// of the scheduler's.
func TestFiredJobIsTracedFromItsFiring(t *testing.T) {
	t.Parallel()
	_, pub := newApprover(t)
	tr, rec := recorder(t)
	n := start(t, tr, pub)
	e, err := scheduler.NewNATS(n.srv.Connect(t), &scheduler.NATSConfig{Logger: quiet, Tracer: tr})
	require.NoError(t, err)
	ctx := testutil.Context(t, 30*time.Second)
	require.NoError(t, e.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.Stop(sctx)
	})
	s, err := e.Create(ctx, &scheduler.Schedule{ID: "soon", In: time.Second, Job: scheduler.Job{Tool: worker.ToolNoop}})
	require.NoError(t, err)
	by := spans(t, rec, map[string]int{"scheduler.fire": 1, "toolq.job noop": 1})
	fire := by["scheduler.fire"][0]
	require.Equal(t, s.ID, attr(fire, tracing.AttrScheduleID).AsString())
	require.Equal(t, "enqueued", attr(fire, tracing.AttrOutcome).AsString())
	require.False(t, fire.Parent().IsValid())
	childOf(t, by["toolq.job noop"][0], fire)
}

// A requester's traceparent in ctx (producer.WithTraceParent) is sent with
// each job it submits, by Submit and by SubmitBatch alike.
func TestProducerSendsTheTraceParentOfCtx(t *testing.T) {
	t.Parallel()
	_, pub := newApprover(t)
	tr, rec := recorder(t)
	n := start(t, tr, pub)
	ctx := producer.WithTraceParent(testutil.Context(t, 20*time.Second), requesterTP)
	one, err := n.prod.Submit(ctx, worker.ToolNoop, json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	batch := []*contracts.Job{{ID: "b1", Tool: worker.ToolNoop}}
	_, err = n.prod.SubmitBatch(ctx, batch, nil)
	require.NoError(t, err)
	for _, id := range []string{one.ID, "b1"} {
		_, err = n.prod.Await(ctx, "s1", id, nil)
		require.NoError(t, err)
	}
	by := spans(t, rec, map[string]int{"toolq.job noop": 2})
	for _, id := range []string{one.ID, "b1"} {
		s := byAttr(t, by["toolq.job noop"], worker.AttrJobID, id)
		require.Equal(t, "00f067aa0ba902b7", s.Parent().SpanID().String(), id)
	}
}

// --otlp-protocol grpc: the same spans over OTLP/gRPC.
func TestOTLPGRPCExport(t *testing.T) {
	t.Parallel()
	recv, err := otlptest.NewGRPC()
	require.NoError(t, err)
	t.Cleanup(recv.Close)
	tr, err := tracing.New(context.Background(), &tracing.Config{Endpoint: recv.URL(), Protocol: tracing.ProtocolGRPC, SampleRatio: 1})
	require.NoError(t, err)
	s := tr.Start(worker.SpanStart{Name: "toolq.job noop", Parent: requesterTP, Consumer: true, Attrs: []slog.Attr{slog.String(worker.AttrJobID, "j1")}})
	s.End("completed", "")
	ctx := testutil.Context(t, 20*time.Second)
	require.NoError(t, tr.Shutdown(ctx)) // exports what is left
	spans := recv.Spans()
	require.Len(t, spans, 1)
	require.Equal(t, "toolq.job noop", spans[0].Span.GetName())
	require.Equal(t, "j1", otlptest.Attr(spans[0].Span, worker.AttrJobID))
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", hex.EncodeToString(spans[0].Span.GetTraceId()))
}
