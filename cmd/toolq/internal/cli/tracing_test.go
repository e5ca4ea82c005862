package cli

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tracing"
	"github.com/toolq/toolq/tracing/otlptest"
	"github.com/toolq/toolq/worker"
)

// toolq dev --otlp-endpoint exports its self-check's spans over OTLP/HTTP:
// the noop job's, and the code-mode run's, whose exec, nested call, report
// and resume are one trace.
func TestDevExportsTraces(t *testing.T) {
	t.Parallel()
	recv := otlptest.New(true)
	t.Cleanup(recv.Close)
	code, _, errOut := run(t, "dev", "--once", "--listen", "127.0.0.1:-1", "--data", t.TempDir(), "--log-level", "warn",
		"--otlp-endpoint", recv.URL(), "--trace-sample-ratio", "1")
	require.Equal(t, 0, code, errOut)
	require.Zero(t, recv.Bad())
	byName := map[string][]otlptest.Span{}
	for _, s := range recv.Spans() {
		require.Equal(t, "toolq", s.Service)
		byName[s.Span.GetName()] = append(byName[s.Span.GetName()], s)
	}
	require.NotEmpty(t, byName["toolq.job "+worker.ToolNoop], "spans: %v", byName)
	execs := byName["toolq.job "+contracts.ToolCodeModeExec]
	require.Len(t, execs, 1)
	trace := execs[0].Span.GetTraceId()
	require.NotEmpty(t, byName["code_mode.resume"])
	for _, name := range []string{"code_mode.resume", "code_mode.suspended", "toolq.job " + contracts.ToolCodeModeResult} {
		for _, s := range byName[name] {
			require.True(t, bytes.Equal(trace, s.Span.GetTraceId()), "%s in another trace than its run", name)
		}
	}
	require.Equal(t, "parked", otlptest.Attr(execs[0].Span, tracing.AttrOutcome))
}

// A bad tracing flag stops the command before it serves.
func TestTracingFlagsChecked(t *testing.T) {
	t.Parallel()
	code, _, errOut := run(t, "dev", "--once", "--listen", "127.0.0.1:-1", "--data", t.TempDir(), "--trace-sample-ratio", "2", "--otlp-endpoint", "127.0.0.1:4318")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "sample ratio")
	code, _, errOut = run(t, "dev", "--once", "--listen", "127.0.0.1:-1", "--data", t.TempDir(), "--otlp-endpoint", "127.0.0.1:4318", "--otlp-protocol", "thrift")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "OTLP protocol")
}

// toolq bench --observe runs observability off and on in turns and prints
// every round, both medians and the overhead; the traced rounds' spans
// reach the receiver.
func TestBenchObserve(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "bench", "--observe", "--jobs", "300", "--submitters", "4", "--concurrency", "16", "--latency-jobs", "0")
	require.Equal(t, 0, code, errOut)
	vals := map[string]float64{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		require.Len(t, f, 3, "stdout line %q", line)
		v, err := strconv.ParseFloat(f[1], 64)
		require.NoError(t, err, line)
		vals[f[0]] = v
	}
	for i := 1; i <= 3; i++ {
		require.Positive(t, vals["bench.observability_off_throughput_round_"+strconv.Itoa(i)])
		require.Positive(t, vals["bench.observability_on_throughput_round_"+strconv.Itoa(i)])
	}
	require.Positive(t, vals["bench.observability_off_throughput_median"])
	require.Positive(t, vals["bench.observability_on_throughput_median"])
	require.Positive(t, vals["bench.observability_throughput_vs_off"])
	require.Positive(t, vals["bench.observability_cpu_per_job_off_median"])
	require.Positive(t, vals["bench.observability_cpu_per_job_on_median"])
	_, ok := vals["bench.observability_overhead_pct"]
	require.True(t, ok, out)
	require.Contains(t, errOut, "bench: observability on, round 3 of 3")
	code, _, errOut = run(t, "bench", "--observe", "--observe-rounds", "2")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "--observe-rounds")
}
