//go:build unix

package tracing_test

import (
	"context"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/toolq/toolq/tracing"
	"github.com/toolq/toolq/tracing/otlptest"
	"github.com/toolq/toolq/worker"
)

// BenchmarkJobSpan is what tracing adds to a job: its span started with
// its attributes and ended, and (sampled) exported in batches over
// OTLP/HTTP to a receiver on loopback; not sampled, what a job pays when
// its trace is dropped. The loop flushes after every batch of 512 spans,
// so no span is dropped for a full queue and the export's cost is in the
// figure. cpu-ns/op is the process's CPU time (the receiver's reads
// included) per span: on a shared machine, less moved by other load than
// ns/op.
func BenchmarkJobSpan(b *testing.B) {
	for _, bc := range []struct {
		name  string
		ratio float64
	}{{"sampled", 1}, {"not_sampled", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			recv := otlptest.NewDiscard()
			defer recv.Close()
			ctx := context.Background()
			tr, err := tracing.New(ctx, &tracing.Config{Endpoint: recv.URL(), SampleRatio: bc.ratio})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = tr.Shutdown(ctx) }()
			const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			b.ReportAllocs()
			n := 0
			cpu0 := cpuNanos(b)
			for b.Loop() {
				// As the worker starts a job's span: once, with every attribute.
				s := tr.Start(worker.SpanStart{Name: "toolq.job noop", Parent: parent, Start: time.Now(), Consumer: true, Attrs: []slog.Attr{
					slog.String(worker.AttrTool, "noop"), slog.Int(worker.AttrAttempt, 1), slog.Float64(worker.AttrQueueWait, 0.4),
					slog.String(worker.AttrJobID, "job-1"), slog.String(worker.AttrSession, "s1"),
				}})
				s.End("completed", "")
				if n++; n%512 == 0 {
					if err := tr.ForceFlush(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := tr.ForceFlush(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(cpuNanos(b)-cpu0)/float64(n), "cpu-ns/op")
			if bc.ratio == 1 && recv.Requests() == 0 {
				b.Fatal("no export reached the receiver")
			}
		})
	}
}

// cpuNanos is the process's CPU time so far, user and system.
func cpuNanos(b *testing.B) int64 {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
