// Package tracing implements the worker's Tracer hook (worker.Tracer) with
// OpenTelemetry: spans of jobs, code-mode resumes and suspensions, and exec
// approval waits, exported over OTLP (HTTP or gRPC) to the operator's
// collector. It is the only package besides cmd that imports OpenTelemetry;
// the worker and the tool packs name no tracing library.
//
// Tracing is off unless an endpoint is given (Config.Endpoint, or the
// standard OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
// variables): a worker without a Tracer starts no span at all.
package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
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
	// Processor, when set, receives the spans instead of an OTLP exporter
	// (tests: tracetest.SpanRecorder).
	Processor sdktrace.SpanProcessor
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

// Tracer is a worker.Tracer that records spans with the OpenTelemetry
// SDK and exports them in batches.
type Tracer struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
}

var (
	_ worker.Tracer    = (*Tracer)(nil)
	_ scheduler.Tracer = (*Tracer)(nil)
)

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
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		// By trace id, never by the parent's flag: the flag is the
		// requester's to set, and the same ratio on the same id gives every
		// worker the same answer for one trace.
		sdktrace.WithSampler(sdktrace.TraceIDRatioBased(ratio)),
	}
	if cfg.Processor != nil {
		opts = append(opts, sdktrace.WithSpanProcessor(cfg.Processor))
	} else {
		exp, err := newExporter(ctx, cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return &Tracer{tp: tp, tracer: tp.Tracer("github.com/toolq/toolq")}, nil
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
	return t.tp.Shutdown(ctx)
}

// ForceFlush exports the spans ended so far.
func (t *Tracer) ForceFlush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// Provider is the OpenTelemetry tracer provider, for a command that also
// traces its own work.
func (t *Tracer) Provider() trace.TracerProvider { return t.tp }

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

// Start implements worker.Tracer.
func (t *Tracer) Start(s worker.SpanStart) worker.Span {
	ctx := context.Background()
	if s.Parent != "" {
		if sc, ok := parseTraceParent(s.Parent); ok {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	opts := make([]trace.SpanStartOption, 0, 4)
	if s.Consumer {
		opts = append(opts, consumerKind)
	}
	if !s.Start.IsZero() {
		opts = append(opts, trace.WithTimestamp(s.Start))
	}
	for _, l := range s.Links {
		if sc, ok := parseTraceParent(l); ok {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	var kv *[]attribute.KeyValue
	if len(s.Attrs) > 0 {
		// The SDK copies the attributes into the span: the slice goes back
		// to the pool after Start.
		kv = attrPool.Get().(*[]attribute.KeyValue)
		*kv = appendAttrs((*kv)[:0], s.Attrs)
		opts = append(opts, trace.WithAttributes(*kv...))
	}
	_, sp := t.tracer.Start(ctx, s.Name, opts...)
	if kv != nil {
		clear(*kv)
		attrPool.Put(kv)
	}
	return &span{sp: sp}
}

var (
	consumerKind = trace.WithSpanKind(trace.SpanKindConsumer)
	attrPool     = sync.Pool{New: func() any { kv := make([]attribute.KeyValue, 0, 12); return &kv }}
)

type span struct {
	sp trace.Span
}

// TraceParent implements worker.Span: the span's context in W3C form, also
// for a span not sampled (its flags say so, and what follows it is not
// sampled either). The span context is immutable, so it is safe to call
// from any goroutine.
func (s *span) TraceParent() string {
	sc := s.sp.SpanContext()
	if !sc.IsValid() {
		return ""
	}
	const hexdigits = "0123456789abcdef"
	var b [55]byte
	b[0], b[1], b[2] = '0', '0', '-'
	tid, sid := sc.TraceID(), sc.SpanID()
	for i, c := range tid {
		b[3+2*i], b[4+2*i] = hexdigits[c>>4], hexdigits[c&0xf]
	}
	b[35] = '-'
	for i, c := range sid {
		b[36+2*i], b[37+2*i] = hexdigits[c>>4], hexdigits[c&0xf]
	}
	b[52], b[53], b[54] = '-', '0', '0'
	if sc.IsSampled() {
		b[54] = '1'
	}
	return string(b[:])
}

func (s *span) SetAttrs(a ...slog.Attr) {
	if s.sp.IsRecording() {
		s.sp.SetAttributes(attrs(a)...)
	}
}

func (s *span) End(outcome string, code contracts.ErrorCode) {
	if s.sp.IsRecording() {
		switch {
		case code != "":
			s.sp.SetAttributes(attribute.String(AttrOutcome, outcome), attribute.String(AttrErrorCode, string(code)))
			s.sp.SetStatus(codes.Error, string(code))
		case outcome != "":
			s.sp.SetAttributes(attribute.String(AttrOutcome, outcome))
		}
	}
	s.sp.End()
}

func attrs(in []slog.Attr) []attribute.KeyValue {
	return appendAttrs(make([]attribute.KeyValue, 0, len(in)), in)
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
