package tracing_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/toolq/toolq/tracing"
	"github.com/toolq/toolq/tracing/otlptest"
	"github.com/toolq/toolq/worker"
)

// BenchmarkJobSpan is what tracing adds to a job: its span started with
// its attributes and ended, and (sampled) exported in batches over
// OTLP/HTTP to a receiver on loopback; not sampled, what a job pays when
// its trace is dropped.
func BenchmarkJobSpan(b *testing.B) {
	for _, bc := range []struct {
		name  string
		ratio float64
	}{{"sampled", 1}, {"not_sampled", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			recv := otlptest.NewDiscard()
			defer recv.Close()
			tr, err := tracing.New(context.Background(), &tracing.Config{Endpoint: recv.URL(), SampleRatio: bc.ratio})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = tr.Shutdown(context.Background()) }()
			const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			b.ReportAllocs()
			for b.Loop() {
				// As the worker starts a job's span: once, with every attribute.
				s := tr.Start(worker.SpanStart{Name: "toolq.job noop", Parent: parent, Start: time.Now(), Consumer: true, Attrs: []slog.Attr{
					slog.String(worker.AttrTool, "noop"), slog.Int(worker.AttrAttempt, 1), slog.Float64(worker.AttrQueueWait, 0.4),
					slog.String(worker.AttrJobID, "job-1"), slog.String(worker.AttrSession, "s1"),
				}})
				s.End("completed", "")
			}
		})
	}
}
