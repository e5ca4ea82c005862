package cli

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolq/toolq/tracing"
)

// tracingFlags is --otlp-endpoint and its companions, on the worker, the
// scheduler and dev.
type tracingFlags struct {
	endpoint, protocol, ratio string
}

func (f *tracingFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.endpoint, "otlp-endpoint", "",
		"export OpenTelemetry traces over OTLP to this collector: http(s)://HOST:PORT[/PATH] or HOST:PORT (off when empty and no OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; the other OTEL_EXPORTER_OTLP_* variables apply)")
	cmd.Flags().StringVar(&f.protocol, "otlp-protocol", "",
		"OTLP protocol: http/protobuf or grpc (default: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)")
	cmd.Flags().StringVar(&f.ratio, "trace-sample-ratio", os.Getenv("OTEL_TRACES_SAMPLER_ARG"),
		"share of traces recorded, 0 to 1, decided by trace id so a trace is whole or absent (default 1; env OTEL_TRACES_SAMPLER_ARG)")
}

// start makes the command's tracer; nil when tracing is off.
func (f *tracingFlags) start(ctx context.Context, g *globals) (*tracing.Tracer, error) {
	ratio, err := tracing.ParseRatio(f.ratio)
	if err != nil {
		return nil, err
	}
	tr, err := tracing.New(ctx, &tracing.Config{Endpoint: f.endpoint, Protocol: f.protocol, SampleRatio: ratio})
	if err != nil || tr == nil {
		return nil, err
	}
	g.log.Info("exporting traces", slog.String("endpoint", redactURL(f.endpoint)), slog.Float64("sample_ratio", ratio))
	return tr, nil
}

// stopTracer exports the spans left, within a bound.
func stopTracer(g *globals, tr *tracing.Tracer) {
	if tr == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		g.log.Warn("traces not all exported", slog.Any("err", err))
	}
}
