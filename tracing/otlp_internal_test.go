package tracing

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tracing/otlptest"
	"github.com/toolq/toolq/worker"
)

// testRecords are ended spans of every shape the tracer makes: a child of
// a remote parent, a root, links, an error status, attributes of every
// kind, a key set twice and an empty key.
func testRecords(t *testing.T, tr *Tracer) []*record {
	t.Helper()
	now := time.Now()
	var recs []*record
	for _, s := range []struct {
		start worker.SpanStart
		set   []slog.Attr
		out   string
		code  string
	}{
		{start: worker.SpanStart{Name: "toolq.job noop", Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Start: now, Consumer: true, Attrs: []slog.Attr{
			slog.String(worker.AttrTool, "noop"), slog.Int(worker.AttrAttempt, 2), slog.Float64(worker.AttrQueueWait, 0.4),
			slog.String(worker.AttrJobID, "job-1"), slog.String(worker.AttrTenant, "acme"),
		}}, out: "completed"},
		{start: worker.SpanStart{Name: "code_mode.resume", Links: []string{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "bad"}, Attrs: []slog.Attr{
			slog.Bool("b", true), slog.Bool("f", false), slog.Uint64("u", math.MaxUint64), slog.Int64("neg", -7),
			slog.Duration("d", 1500*time.Microsecond), slog.Any("any", []int{1, 2}), slog.String("", "dropped"), slog.String("k", "first"),
		}}, set: []slog.Attr{slog.String("k", "last"), slog.Int("step", 3)}, out: "failed", code: "TOOL_ERROR"},
		{start: worker.SpanStart{Name: "exec.approval_wait", Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03", Start: now.Add(-time.Second)}, out: ""},
	} {
		sp, ok := tr.Start(s.start).(*span)
		require.True(t, ok)
		sp.SetAttrs(s.set...)
		r := sp.finish(s.out, contracts.ErrorCode(s.code))
		require.NotNil(t, r)
		recs = append(recs, r)
	}
	return recs
}

// The OTLP/HTTP writer sends what the SDK's OTLP/HTTP exporter sends for
// the same spans: both requests are decoded by a receiver with the OTLP
// protobuf package and compared message by message.
func TestOTLPWriterSendsWhatTheSDKExporterSends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "toolq"), attribute.Int64("n", 3)), resource.WithTelemetrySDK())
	require.NoError(t, err)
	tr := &Tracer{always: true, res: res}
	tr.records.New = func() any { return new(record) }
	recs := testRecords(t, tr)

	mine, theirs := otlptest.New(true), otlptest.New(true)
	t.Cleanup(mine.Close)
	t.Cleanup(theirs.Close)
	w, err := newHTTPSink(&Config{Endpoint: mine.URL()}, res)
	require.NoError(t, err)
	require.NoError(t, w.export(ctx, recs))
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(theirs.URL()+"/v1/traces"))
	require.NoError(t, err)
	ro := make([]sdktrace.ReadOnlySpan, 0, len(recs))
	for _, r := range recs {
		ro = append(ro, tr.snapshot(r))
	}
	require.NoError(t, exp.ExportSpans(ctx, ro))
	require.NoError(t, exp.Shutdown(ctx))

	got, want := mine.Spans(), theirs.Spans()
	require.Len(t, want, len(recs))
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, want[i].Service, got[i].Service)
		require.True(t, proto.Equal(want[i].Span, got[i].Span), "span %d:\nwriter: %s\nSDK:    %s", i, prototext.Format(got[i].Span), prototext.Format(want[i].Span))
	}
	require.Zero(t, mine.Bad())
	// The request as a whole, resource included, decodes as the SDK's.
	require.Equal(t, theirs.Requests(), mine.Requests())
}

// blockSink holds its first export until release is closed.
type blockSink struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	got     int
}

func (s *blockSink) export(_ context.Context, recs []*record) error {
	s.once.Do(func() {
		close(s.started)
		<-s.release
	})
	s.mu.Lock()
	s.got += len(recs)
	s.mu.Unlock()
	return nil
}

func (s *blockSink) shutdown(context.Context) error { return nil }

// A collector that does not answer costs dropped spans past the queue,
// never a blocked End; a flush sends everything queued, and a second
// shutdown is harmless.
func TestBatcherDropsPastTheQueueAndFlushesTheRest(t *testing.T) {
	t.Parallel()
	s := &blockSink{started: make(chan struct{}), release: make(chan struct{})}
	var mu sync.Mutex
	freed := 0
	b := newBatcher(context.Background(), s, func(*record) { mu.Lock(); freed++; mu.Unlock() }, slog.New(slog.DiscardHandler))
	for range maxBatch {
		b.add(&record{})
	}
	<-s.started // the first batch is out, its export held
	for range maxQueue + 5 {
		b.add(&record{}) // never waits
	}
	mu.Lock()
	require.Equal(t, 5, freed, "the spans past a full queue are dropped at once")
	mu.Unlock()
	close(s.release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.flush(ctx))
	s.mu.Lock()
	require.Equal(t, maxBatch+maxQueue, s.got)
	s.mu.Unlock()
	require.NoError(t, b.shutdown(ctx))
	require.NoError(t, b.shutdown(ctx))
	require.NoError(t, b.flush(ctx), "a flush after shutdown has nothing to do")
}

// The writer takes the endpoint variables and headers as the SDK's
// exporter does, and leaves to it the settings it does not implement.
func TestHTTPSinkFromTheEnvironment(t *testing.T) {
	recv := otlptest.New(true)
	t.Cleanup(recv.Close)
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"} {
		t.Setenv(v, "")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL()+"/")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20abc, x-a = 1")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-a=2")
	ctx := context.Background()
	res := resource.Empty()
	s, err := newSink(ctx, &Config{}, res)
	require.NoError(t, err)
	w, ok := s.(*httpSink)
	require.True(t, ok, "OTLP/HTTP without other settings is the writer's")
	require.Equal(t, recv.URL()+"/v1/traces", w.url)
	require.Equal(t, "Bearer abc", w.headers.Get("Authorization"))
	require.Equal(t, "2", w.headers.Get("X-A"), "the traces variable wins")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", recv.URL()+"/custom")
	w, err = newHTTPSink(&Config{}, res)
	require.NoError(t, err)
	require.Equal(t, recv.URL()+"/custom", w.url)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "novalue")
	_, err = newHTTPSink(&Config{}, res)
	require.Error(t, err)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "")

	t.Setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
	s, err = newSink(ctx, &Config{}, res)
	require.NoError(t, err)
	_, ok = s.(*sdkSink)
	require.True(t, ok, "compression is the SDK exporter's")
	require.NoError(t, s.shutdown(ctx))
}
