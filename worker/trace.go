package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

type traceKey struct{}

func withTraceParent(ctx context.Context, tp string) context.Context {
	return context.WithValue(ctx, traceKey{}, tp)
}

func traceParent(ctx context.Context) string {
	switch v := ctx.Value(traceKey{}).(type) {
	case string:
		return v
	case Span:
		// The delivery's span: its traceparent is made only when asked for.
		return v.TraceParent()
	}
	return ""
}

type headersKey struct{}

// Header returns a header of the message the running job came in, "" when
// it has none: for handlers that read what a requester sent beside the job
// (contracts.HeaderCatalogSeq). Headers are the requester's to set: treat
// them as untrusted input.
func Header(ctx context.Context, name string) string {
	h, _ := ctx.Value(headersKey{}).(nats.Header)
	if h == nil {
		return ""
	}
	return h.Get(name)
}

// TraceParent returns the W3C traceparent the running job carried, if any,
// so a handler can pass it on to the jobs it submits.
func TraceParent(ctx context.Context) string { return traceParent(ctx) }

func traceOf(msg jetstream.Msg) string {
	if h := msg.Headers(); h != nil {
		return h.Get(bus.HeaderTraceParent)
	}
	return ""
}

// Tracer starts the spans of distributed traces. The worker names no
// tracing library: package tracing implements Tracer with OpenTelemetry,
// and a nil Config.Tracer costs the hot path one nil check and no span.
//
// With a Tracer the worker starts a span for every delivery of a job, a
// child of the traceparent the job's message carried (a new trace when it
// carried none, or one that does not parse), and hands the span's own
// traceparent to the handler (TraceParent): the jobs a handler submits with
// it are children of the delivery's span, so a job and all it leads to are
// one trace. Tool packs start spans of their own steps with StartSpan.
type Tracer interface {
	// Start starts a span; it must be safe to call from many goroutines.
	Start(s SpanStart) Span
}

// Span is a started span. Its methods but TraceParent are called from one
// goroutine.
type Span interface {
	// TraceParent is the W3C traceparent naming this span, for the jobs
	// started under it; "" when the span is not recorded anywhere. It may
	// be called from several goroutines at once (the job's handler's), and
	// after End.
	TraceParent() string
	// SetAttrs adds attributes (strings, integers, booleans, durations).
	SetAttrs(attrs ...slog.Attr)
	// End ends the span with what its work came to (a job's Outcome, a
	// decision) and the error code when it failed ("" when it did not).
	End(outcome string, code contracts.ErrorCode)
}

// SpanStart describes a span to start.
type SpanStart struct {
	// Name is the span's name, like "code_mode.resume".
	Name string
	// Parent is the W3C traceparent of the span's parent; "" (or one that
	// does not parse) starts a new trace.
	Parent string
	// Links are traceparents of spans this one follows from without being
	// their child (the job that triggered a resume).
	Links []string
	// Start is when the span began; zero for now. A span of a wait that
	// began in another job (a suspension, an approval) is started when
	// the wait ends, with the wait's start.
	Start time.Time
	// Consumer marks the span of a job's delivery (OpenTelemetry's
	// consumer kind); other spans are internal.
	Consumer bool
	// Attrs are the span's attributes: ids, tool, tenant, figures —
	// never a job's input or a secret. Start copies what it keeps: the
	// caller may reuse the slice once Start returns.
	Attrs []slog.Attr
}

// Attribute keys of the spans the worker starts, for the tracer and for
// tool packs' spans.
const (
	AttrJobID     = "toolq.job.id"
	AttrTool      = "toolq.tool"
	AttrTenant    = "toolq.tenant"
	AttrSession   = "toolq.session"
	AttrAttempt   = "toolq.attempt"
	AttrQueueWait = "toolq.queue_wait_ms"
	AttrParentRun = "toolq.parent.run_id"
)

// noSpan is the span of a worker without a Tracer.
type noSpan struct{}

func (noSpan) TraceParent() string             { return "" }
func (noSpan) SetAttrs(...slog.Attr)           {}
func (noSpan) End(string, contracts.ErrorCode) {}

// StartSpan starts a span with the worker's Tracer, or returns one that
// records nothing (and allocates nothing) when it has none.
func (w *Worker) StartSpan(s SpanStart) Span {
	if w.cfg.Tracer == nil {
		return noSpan{}
	}
	return w.cfg.Tracer.Start(s)
}

// Tracing reports whether the worker has a Tracer, so a tool pack can skip
// building a span's attributes when nothing would record them.
func (w *Worker) Tracing() bool { return w.cfg.Tracer != nil }

// WithTraceParent returns ctx with tp as the traceparent TraceParent
// reports: a tool pack that started a span of its own passes its
// traceparent on this way to what it submits under it.
func WithTraceParent(ctx context.Context, tp string) context.Context {
	if tp == "" {
		return ctx
	}
	return withTraceParent(ctx, tp)
}

// spanAttrs holds the attribute slices of job spans: Start copies them.
var spanAttrs = sync.Pool{New: func() any { a := make([]slog.Attr, 0, 8); return &a }}

// startJobSpan starts the span of one delivery, taken at start; job is
// the decoded job unless decoding or checking it failed (err).
func (w *Worker) startJobSpan(t *tool, msg jetstream.Msg, attempt int, md *jetstream.MsgMetadata, start time.Time, job *contracts.Job, err error) Span {
	buf := spanAttrs.Get().(*[]slog.Attr)
	attrs := (*buf)[:0]
	attrs = append(attrs, slog.String(AttrTool, t.name), slog.Int(AttrAttempt, attempt),
		slog.Float64(AttrQueueWait, float64(max(start.Sub(md.Timestamp), 0).Microseconds())/1000))
	if err == nil {
		attrs = append(attrs, slog.String(AttrJobID, job.ID), slog.String(AttrSession, job.Session))
		if job.Tenant != "" {
			attrs = append(attrs, slog.String(AttrTenant, job.Tenant))
		}
		if job.Parent != nil && job.Parent.RunID != "" {
			attrs = append(attrs, slog.String(AttrParentRun, job.Parent.RunID))
		}
	} else if tenant, ok := w.cfg.Subjects.TenantOf(msg.Subject()); ok && tenant != "" {
		attrs = append(attrs, slog.String(AttrTenant, tenant))
	}
	sp := w.cfg.Tracer.Start(SpanStart{Name: t.spanName, Parent: traceOf(msg), Start: start, Consumer: true, Attrs: attrs})
	clear(attrs)
	*buf = attrs[:0]
	spanAttrs.Put(buf)
	return sp
}
