package tracing

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// sink sends a batch of ended spans to the collector.
type sink interface {
	export(ctx context.Context, recs []*record) error
	shutdown(ctx context.Context) error
}

// batcher queues ended spans and has one goroutine export them in
// batches, as the SDK's batch span processor does: a full batch or the
// ticker sends, a full queue drops (an End never waits for the
// collector).
type batcher struct {
	sink    sink
	release func(*record)
	log     *slog.Logger

	mu      sync.Mutex
	queue   []*record
	dropped int

	kick    chan struct{} // the queue holds a full batch
	flushes chan chan error
	quit    chan struct{}
	done    chan struct{}
	stop    sync.Once
	out     []*record // the batch being exported; the goroutine's own
}

// newBatcher starts the batcher's goroutine; ctx (not cancelled) is the
// base of each export's own timeout.
func newBatcher(ctx context.Context, s sink, release func(*record), log *slog.Logger) *batcher {
	b := &batcher{
		sink: s, release: release, log: log,
		queue: make([]*record, 0, maxQueue), out: make([]*record, 0, maxBatch),
		kick: make(chan struct{}, 1), flushes: make(chan chan error),
		quit: make(chan struct{}), done: make(chan struct{}),
	}
	go b.run(ctx) // ended by shutdown, which waits for done
	return b
}

func (b *batcher) add(r *record) {
	b.mu.Lock()
	if len(b.queue) >= maxQueue {
		b.dropped++
		b.mu.Unlock()
		b.release(r)
		return
	}
	b.queue = append(b.queue, r)
	full := len(b.queue) >= maxBatch
	b.mu.Unlock()
	if full {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
}

func (b *batcher) run(ctx context.Context) {
	defer close(b.done)
	tick := time.NewTicker(exportEvery)
	defer tick.Stop()
	for {
		select {
		case <-b.kick:
			_ = b.export(ctx, false)
		case <-tick.C:
			_ = b.export(ctx, true)
		case reply := <-b.flushes:
			reply <- b.export(ctx, true)
		case <-b.quit:
			_ = b.export(ctx, true)
			return
		}
	}
}

// export sends the queue in batches: all of it, or (all false) its full
// batches only.
func (b *batcher) export(ctx context.Context, all bool) error {
	var errs error
	for {
		b.mu.Lock()
		n := min(len(b.queue), maxBatch)
		if n == 0 || (!all && n < maxBatch) {
			b.mu.Unlock()
			return errs
		}
		b.out = append(b.out[:0], b.queue[:n]...)
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		dropped := b.dropped
		b.dropped = 0
		b.mu.Unlock()
		if dropped > 0 {
			b.log.Warn("tracing: export queue full; spans dropped", slog.Int("spans", dropped))
		}
		ectx, cancel := context.WithTimeout(ctx, exportTimeout)
		err := b.sink.export(ectx, b.out)
		cancel()
		for i, r := range b.out {
			b.release(r)
			b.out[i] = nil
		}
		if err != nil {
			b.log.Warn("tracing: export failed; spans dropped", slog.Int("spans", n), slog.Any("err", err))
			errs = errors.Join(errs, err)
		}
	}
}

// flush exports every span queued so far.
func (b *batcher) flush(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case b.flushes <- reply:
	case <-b.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shutdown exports what is queued and stops the sink; a second call
// waits as the first.
func (b *batcher) shutdown(ctx context.Context) error {
	first := false
	b.stop.Do(func() {
		first = true
		close(b.quit)
	})
	select {
	case <-b.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if !first {
		return nil
	}
	return b.sink.shutdown(ctx)
}

// sdkSink exports through an OpenTelemetry SDK exporter (gRPC, and the
// exporter settings the OTLP/HTTP writer does not take), fed with
// snapshots of the records.
type sdkSink struct {
	t   *Tracer
	exp sdktrace.SpanExporter
	ro  []sdktrace.ReadOnlySpan
}

func (s *sdkSink) export(ctx context.Context, recs []*record) error {
	s.ro = s.ro[:0]
	for _, r := range recs {
		s.ro = append(s.ro, s.t.snapshot(r))
	}
	err := s.exp.ExportSpans(ctx, s.ro)
	clear(s.ro)
	return err
}

func (s *sdkSink) shutdown(ctx context.Context) error { return s.exp.Shutdown(ctx) }

// snapshot is r as the SDK's read-only span, for a Processor or an SDK
// exporter.
func (t *Tracer) snapshot(r *record) sdktrace.ReadOnlySpan {
	stub := tracetest.SpanStub{
		Name:                 r.name,
		SpanContext:          trace.NewSpanContext(trace.SpanContextConfig{TraceID: r.tid, SpanID: r.sid, TraceFlags: r.flags}),
		SpanKind:             trace.SpanKindInternal,
		StartTime:            time.Unix(0, r.start),
		EndTime:              time.Unix(0, r.end),
		Resource:             t.res,
		InstrumentationScope: instrumentation.Scope{Name: scopeName},
	}
	if r.consumer {
		stub.SpanKind = trace.SpanKindConsumer
	}
	if r.parent.IsValid() {
		stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: r.tid, SpanID: r.parent, TraceFlags: r.pflags, Remote: r.remote})
	}
	if len(r.attrs) > 0 {
		stub.Attributes = make([]attribute.KeyValue, 0, len(r.attrs))
		for i := range r.attrs {
			if a, ok := attrAt(r.attrs, i); ok {
				stub.Attributes = appendAttrs(stub.Attributes, []slog.Attr{a})
			}
		}
	}
	for _, l := range r.links {
		stub.Links = append(stub.Links, sdktrace.Link{SpanContext: l})
	}
	if r.errorCode != "" {
		stub.Status = sdktrace.Status{Code: codes.Error, Description: r.errorCode}
	}
	return stub.Snapshot()
}

// attrAt is the attribute to write for attrs[i]: each key once, at its
// first appearance, with its last value (the SDK's de-duplication); false
// for a later appearance and for an empty key (the SDK drops those as
// invalid).
func attrAt(attrs []slog.Attr, i int) (slog.Attr, bool) {
	a := attrs[i]
	if a.Key == "" {
		return a, false
	}
	for _, p := range attrs[:i] {
		if p.Key == a.Key {
			return a, false
		}
	}
	for _, l := range attrs[i+1:] {
		if l.Key == a.Key {
			a = l
		}
	}
	return a, true
}
