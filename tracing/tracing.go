// Package tracing implements the worker's Tracer hook (worker.Tracer) with
// OpenTelemetry: spans of jobs, code-mode resumes and suspensions, and exec
// approval waits, exported over OTLP (HTTP or gRPC) to the operator's
// collector. It is the only package besides cmd that imports OpenTelemetry;
// the worker and the tool packs name no tracing library.
//
// A job's span is on the hot path of every delivery, so it is not an SDK
// span: it is its ids and, when its trace is sampled, a pooled record,
// batched and written as OTLP/HTTP protobuf by this package (the SDK's
// exporter sends gRPC, and OTLP/HTTP with the exporter settings the
// writer does not take). The writer's output is tested against the SDK
// exporter's for the same spans.
//
// Tracing is off unless an endpoint is given (Config.Endpoint, or the
// standard OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// variables): a worker without a Tracer starts no span at all.
package tracing

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/scheduler"
	"github.com/toolq/toolq/worker"
)

// Protocols of the OTLP exporter.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Attribute keys this package adds when a span ends.
const (
	AttrOutcome   = "toolq.outcome"
	AttrErrorCode = "toolq.error.code"
	// AttrScheduleID and AttrScheduleLate are a firing's schedule and how
	// late it fired after its due time.
	AttrScheduleID   = "toolq.schedule.id"
	AttrScheduleLate = "toolq.schedule.late_ms"
)

// Config configures a Tracer.
type Config struct {
	// Endpoint is the collector's OTLP endpoint: a URL (http://host:4318,
	// https://…) or host:port (plain HTTP or gRPC without TLS). For
	// OTLP/HTTP a URL without a path gets /v1/traces, as
	// OTEL_EXPORTER_OTLP_ENDPOINT does. Empty: the OTEL_EXPORTER_OTLP_*
	// variables configure the exporter (and with neither endpoint
	// variable set, Enabled reports false).
	Endpoint string
	// Protocol is ProtocolHTTP or ProtocolGRPC; empty takes
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL,
	// else ProtocolHTTP.
	Protocol string
	// SampleRatio is the share of traces recorded, in [0, 1]. The decision
	// is a function of the trace id alone, so every worker takes the same
	// one for all spans of a trace. Negative: 1.
	SampleRatio float64
	// ServiceName is the service.name resource attribute ("toolq" when
	// empty; OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override).
	ServiceName string
	// Processor, when set, receives each sampled span as it ends (OnEnd,
	// an SDK snapshot) instead of an OTLP exporter (tests:
	// tracetest.SpanRecorder). OnStart is not called.
	Processor sdktrace.SpanProcessor
	// Logger logs failed exports (slog.Default when nil).
	Logger *slog.Logger
}

// Enabled reports whether cfg turns tracing on: an endpoint, a processor,
// or an endpoint variable in the environment (and OTEL_SDK_DISABLED is
// not true).
func Enabled(cfg *Config) bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	return cfg.Endpoint != "" || cfg.Processor != nil ||
		os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Tracer is a worker.Tracer that records spans itself and exports them in
// batches: over OTLP/HTTP with its own protobuf writer, or through the
// OpenTelemetry SDK's exporter (gRPC, and the exporter settings the writer
// does not take), or to Config.Processor.
type Tracer struct {
	bound   uint64 // TraceIDRatioBased's bound on a trace id's low 63 bits
	always  bool   // ratio 1: every trace
	proc    sdktrace.SpanProcessor
	res     *resource.Resource
	batch   *batcher // nil with proc
	records sync.Pool
}

var (
	_ worker.Tracer    = (*Tracer)(nil)
	_ scheduler.Tracer = (*Tracer)(nil)
)

// Batching of the export: a queue of maxQueue spans (past it a span is
// dropped, never waited for), sent in batches of at most maxBatch, at
// least every exportEvery; each export may take exportTimeout.
const (
	maxQueue      = 2048
	maxBatch      = 512
	exportEvery   = 5 * time.Second
	exportTimeout = 10 * time.Second
)

// scopeName is the instrumentation scope of every span.
const scopeName = "github.com/toolq/toolq"

// New makes a Tracer, or returns nil, nil when cfg does not turn tracing
// on (Enabled): a nil *Tracer is no worker.Tracer, so check before setting
// worker.Config.Tracer. Shutdown flushes it.
func New(ctx context.Context, cfg *Config) (*Tracer, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if !Enabled(cfg) {
		return nil, nil
	}
	ratio := cfg.SampleRatio
	if ratio < 0 {
		ratio = 1
	}
	if ratio > 1 {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "trace sample ratio %v out of range [0, 1]", ratio)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "toolq"
	}
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", name)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	// By trace id, never by the parent's flag: the flag is the requester's
	// to set, and the same ratio on the same id gives every worker the
	// same answer for one trace. The bound is the SDK's TraceIDRatioBased.
	t := &Tracer{always: ratio >= 1, bound: uint64(ratio * (1 << 63)), res: res, proc: cfg.Processor}
	t.records.New = func() any { return new(record) }
	if t.proc == nil {
		exp, err := newSink(ctx, cfg, res)
		if err != nil {
			return nil, err
		}
		t.batch = newBatcher(context.WithoutCancel(ctx), exp, t.release, log)
	}
	return t, nil
}

// protocol is cfg's exporter protocol.
func protocol(cfg *Config) (string, error) {
	p := cfg.Protocol
	if p == "" {
		p = os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	}
	if p == "" {
		p = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch p {
	case "", ProtocolHTTP, "http":
		return ProtocolHTTP, nil
	case ProtocolGRPC:
		return ProtocolGRPC, nil
	}
	return "", contracts.Errorf(contracts.CodeInvalidInput, "OTLP protocol %q: want %s or %s", p, ProtocolHTTP, ProtocolGRPC)
}

// endpointURL is cfg.Endpoint as a URL: host:port becomes http://host:port.
func endpointURL(ep string) (*url.URL, error) {
	if !strings.Contains(ep, "://") {
		ep = "http://" + ep
	}
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "OTLP endpoint %q: want http(s)://host:port[/path] or host:port", ep)
	}
	return u, nil
}

func newExporter(ctx context.Context, cfg *Config) (sdktrace.SpanExporter, error) {
	proto, err := protocol(cfg)
	if err != nil {
		return nil, err
	}
	var u *url.URL
	if cfg.Endpoint != "" {
		if u, err = endpointURL(cfg.Endpoint); err != nil {
			return nil, err
		}
	}
	if proto == ProtocolGRPC {
		var opts []otlptracegrpc.Option
		if u != nil {
			opts = append(opts, otlptracegrpc.WithEndpointURL(u.String()))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	var opts []otlptracehttp.Option
	if u != nil {
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	}
	return otlptracehttp.New(ctx, opts...)
}

// Shutdown exports the spans not yet sent and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if t.proc != nil {
		return t.proc.Shutdown(ctx)
	}
	return t.batch.shutdown(ctx)
}

// ForceFlush exports the spans ended so far.
func (t *Tracer) ForceFlush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if t.proc != nil {
		return t.proc.ForceFlush(ctx)
	}
	return t.batch.flush(ctx)
}

// parseTraceParent reads a W3C traceparent as propagation.TraceContext
// does (the same parts, versions, flags and refusals; tracestate is not
// carried), without the carrier and contexts Extract allocates: it runs
// for every job.
func parseTraceParent(h string) (trace.SpanContext, bool) {
	var ver [1]byte
	if !hexPart(ver[:], &h, 2) || ver[0] == 0xff {
		return trace.SpanContext{}, false
	}
	var scc trace.SpanContextConfig
	var opts [1]byte
	if !hexPart(scc.TraceID[:], &h, 32) || !hexPart(scc.SpanID[:], &h, 16) || !hexPart(opts[:], &h, 2) {
		return trace.SpanContext{}, false
	}
	if ver[0] == 0 && (h != "" || opts[0] > 3) {
		return trace.SpanContext{}, false
	}
	scc.TraceFlags = trace.TraceFlags(opts[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	scc.Remote = true
	sc := trace.NewSpanContext(scc)
	return sc, sc.IsValid()
}

// hexPart decodes the next dash-separated part of *h, of n lower-case hex
// digits, into dst.
func hexPart(dst []byte, h *string, n int) bool {
	part, left, _ := strings.Cut(*h, "-")
	*h = left
	if len(part) != n {
		return false
	}
	for i := 0; i < n; i += 2 {
		hi, ok1 := unhex(part[i])
		lo, ok2 := unhex(part[i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i/2] = hi<<4 | lo
	}
	return true
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// record is what a sampled span carries to its export. Records are
// pooled: one goes back to the pool once its batch is exported.
type record struct {
	name      string
	tid       trace.TraceID
	sid       trace.SpanID
	flags     trace.TraceFlags
	parent    trace.SpanID // zero for a trace's root
	pflags    trace.TraceFlags
	remote    bool // the parent came in a message
	consumer  bool
	start     int64 // Unix ns
	end       int64
	attrs     []slog.Attr
	links     []trace.SpanContext
	errorCode string // status error with this message when set
}

func (r *record) reset() {
	clear(r.attrs)
	clear(r.links)
	*r = record{attrs: r.attrs[:0], links: r.links[:0]}
}

// Start implements worker.Tracer. A span is a few ids and, when its trace
// is sampled, a pooled record; no OpenTelemetry span is made.
func (t *Tracer) Start(s worker.SpanStart) worker.Span {
	var (
		parent trace.SpanContext
		ok     bool
	)
	if s.Parent != "" {
		parent, ok = parseTraceParent(s.Parent)
	}
	sp := &span{t: t, sid: newSpanID()}
	if ok {
		sp.tid = parent.TraceID()
	} else {
		sp.tid = newTraceID()
	}
	sp.flags = parent.TraceFlags() &^ trace.FlagsSampled
	if !t.sampled(sp.tid) {
		return sp
	}
	sp.flags |= trace.FlagsSampled
	r := t.records.Get().(*record)
	r.name, r.tid, r.sid, r.flags, r.consumer = s.Name, sp.tid, sp.sid, sp.flags, s.Consumer
	if ok {
		r.parent, r.pflags, r.remote = parent.SpanID(), parent.TraceFlags(), true
	}
	if s.Start.IsZero() {
		r.start = time.Now().UnixNano()
	} else {
		r.start = s.Start.UnixNano()
	}
	r.attrs = append(r.attrs, s.Attrs...)
	for _, l := range s.Links {
		if sc, ok := parseTraceParent(l); ok {
			r.links = append(r.links, sc)
		}
	}
	sp.rec = r
	return sp
}

// sampled is TraceIDRatioBased's decision for tid.
func (t *Tracer) sampled(tid trace.TraceID) bool {
	return t.always || binary.BigEndian.Uint64(tid[8:16])>>1 < t.bound
}

// release gives an exported record back to the pool.
func (t *Tracer) release(r *record) {
	r.reset()
	t.records.Put(r)
}

// newTraceID and newSpanID are random, non-zero ids, from the runtime's
// per-thread generator (no lock, unlike the SDK's).
func newTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:8], rand.Uint64()) //nolint:gosec // G404: ids, not secrets
		binary.BigEndian.PutUint64(id[8:], rand.Uint64()) //nolint:gosec // G404: ids, not secrets
	}
	return id
}

func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], rand.Uint64()) //nolint:gosec // G404: ids, not secrets
	}
	return id
}

// span is a started span: its ids, immutable (TraceParent may be called
// from any goroutine, also after End), and its record while it is open
// and sampled.
type span struct {
	t     *Tracer
	tid   trace.TraceID
	sid   trace.SpanID
	flags trace.TraceFlags
	rec   *record // nil when not sampled, or ended
}

// TraceParent implements worker.Span: the span's context in W3C form, also
// for a span not sampled (its flags say so, and what follows it is not
// sampled either).
func (s *span) TraceParent() string {
	const hexdigits = "0123456789abcdef"
	var b [55]byte
	b[0], b[1], b[2] = '0', '0', '-'
	for i, c := range s.tid {
		b[3+2*i], b[4+2*i] = hexdigits[c>>4], hexdigits[c&0xf]
	}
	b[35] = '-'
	for i, c := range s.sid {
		b[36+2*i], b[37+2*i] = hexdigits[c>>4], hexdigits[c&0xf]
	}
	b[52], b[53], b[54] = '-', '0', '0'
	if s.flags.IsSampled() {
		b[54] = '1'
	}
	return string(b[:])
}

func (s *span) SetAttrs(a ...slog.Attr) {
	if s.rec != nil {
		s.rec.attrs = append(s.rec.attrs, a...)
	}
}

func (s *span) End(outcome string, code contracts.ErrorCode) {
	r := s.finish(outcome, code)
	if r == nil {
		return
	}
	if s.t.proc != nil {
		s.t.proc.OnEnd(s.t.snapshot(r))
		s.t.release(r)
		return
	}
	s.t.batch.add(r)
}

// finish ends the span's record, nil when it has none (not sampled, or
// ended before).
func (s *span) finish(outcome string, code contracts.ErrorCode) *record {
	r := s.rec
	if r == nil {
		return nil
	}
	s.rec = nil
	r.end = time.Now().UnixNano()
	if outcome != "" {
		r.attrs = append(r.attrs, slog.String(AttrOutcome, outcome))
	}
	if code != "" {
		r.attrs = append(r.attrs, slog.String(AttrErrorCode, string(code)))
		r.errorCode = string(code)
	}
	return r
}

func appendAttrs(out []attribute.KeyValue, in []slog.Attr) []attribute.KeyValue {
	for _, a := range in {
		v := a.Value.Resolve()
		switch v.Kind() {
		case slog.KindString:
			out = append(out, attribute.String(a.Key, v.String()))
		case slog.KindInt64:
			out = append(out, attribute.Int64(a.Key, v.Int64()))
		case slog.KindUint64:
			out = append(out, attribute.Int64(a.Key, int64(min(v.Uint64(), 1<<63-1)))) //nolint:gosec // G115: capped
		case slog.KindFloat64:
			out = append(out, attribute.Float64(a.Key, v.Float64()))
		case slog.KindBool:
			out = append(out, attribute.Bool(a.Key, v.Bool()))
		case slog.KindDuration:
			out = append(out, attribute.Float64(a.Key, float64(v.Duration().Microseconds())/1000))
		default:
			out = append(out, attribute.String(a.Key, v.String()))
		}
	}
	return out
}

// ParseRatio reads a sample ratio from a flag's or OTEL_TRACES_SAMPLER_ARG's
// text; "" is 1.
func ParseRatio(s string) (float64, error) {
	if s == "" {
		return 1, nil
	}
	r, err := strconv.ParseFloat(s, 64)
	if err != nil || r < 0 || r > 1 {
		return 0, contracts.Errorf(contracts.CodeInvalidInput, "trace sample ratio %q: want a number in [0, 1]", s)
	}
	return r, nil
}

// Firing implements scheduler.Tracer: a firing is the root of the fired
// job's trace.
func (t *Tracer) Firing(id, tool string, due time.Time) (string, func(contracts.ErrorCode)) {
	s := t.Start(worker.SpanStart{Name: "scheduler.fire", Attrs: []slog.Attr{
		slog.String(AttrScheduleID, id), slog.String(worker.AttrTool, tool),
		slog.Float64(AttrScheduleLate, float64(max(time.Since(due), 0).Microseconds())/1000),
	}})
	return s.TraceParent(), func(code contracts.ErrorCode) {
		outcome := "enqueued"
		if code != "" {
			outcome = "failed"
		}
		s.End(outcome, code)
	}
}
