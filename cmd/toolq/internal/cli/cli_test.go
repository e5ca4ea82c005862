package cli

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/metrics"
	"github.com/toolq/toolq/worker"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = mainIO(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestDevOnceRunsSelfCheck(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, out, errOut := run(t, "dev", "--once", "--listen", "127.0.0.1:-1", "--data", dir, "--log-level", "warn", "--ui-listen", "127.0.0.1:0")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `toolq dev: web console   http://127\.0\.0\.1:\d+/`, errOut)
	require.Contains(t, errOut, "self-check job")
	require.Contains(t, errOut, "self-check code-mode run")
	dec := json.NewDecoder(strings.NewReader(out))
	var ev contracts.Event
	require.NoError(t, dec.Decode(&ev))
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	require.JSONEq(t, `{"hello":"toolq"}`, string(ev.Data.Result))
	var cm struct {
		Status string `json:"status"`
		Value  struct {
			Echo  map[string]string `json:"echo"`
			Tools int               `json:"tools"`
		} `json:"value"`
		Telemetry struct {
			Resumes int `json:"resumes"`
		} `json:"telemetry"`
	}
	require.NoError(t, dec.Decode(&cm))
	require.Equal(t, "completed", cm.Status)
	require.Equal(t, "code mode", cm.Value.Echo["hello"])
	require.GreaterOrEqual(t, cm.Value.Tools, 3)
	require.Equal(t, 1, cm.Telemetry.Resumes)
	// The data directory is kept: a second start finds the streams.
	_, err := os.Stat(filepath.Join(dir, "jetstream"))
	require.NoError(t, err)
	code, _, errOut = run(t, "dev", "--once", "--listen", "127.0.0.1:-1", "--data", dir, "--log-level", "warn")
	require.Equal(t, 0, code, errOut)
}

func startBus(t *testing.T) string {
	t.Helper()
	srv := testutil.StartJetStream(t)
	w, err := worker.New(srv.Connect(t), &worker.Config{Logger: slog.New(slog.DiscardHandler), Builtins: true})
	require.NoError(t, err)
	require.NoError(t, w.Start(testutil.Context(t, 10*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return srv.ClientURL()
}

func TestSubmitWaitEventsCancel(t *testing.T) {
	t.Parallel()
	url := startBus(t)

	code, out, errOut := run(t, "--nats", url, "submit", "--tool", "noop", "--input", `{"n":1}`, "--session", "cli", "--id", "job-1", "--wait")
	require.Equal(t, 0, code, errOut)
	var ev contracts.Event
	require.NoError(t, json.Unmarshal([]byte(out), &ev))
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	require.Equal(t, "job-1", ev.Data.JobID)

	in := filepath.Join(t.TempDir(), "job.json")
	require.NoError(t, os.WriteFile(in, []byte(`{"ms":60000}`), 0o600))
	code, out, errOut = run(t, "--nats", url, "submit", "--tool", "sleep", "--input", "@"+in, "--session", "cli")
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)
	require.True(t, contracts.ValidID(id), id)

	code, out, errOut = run(t, "--nats", url, "cancel", "--session", "cli", id)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "cancelled "+id)

	code, out, errOut = run(t, "--nats", url, "events", "--session", "cli")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "completed")
	require.Contains(t, out, "job-1")
	require.Contains(t, out, "cancelled")

	code, out, errOut = run(t, "--nats", url, "--json", "events", "--session", "cli", "--job", "job-1")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, 1, strings.Count(out, `"specversion"`))
}

func TestBadInputExitsTwo(t *testing.T) {
	t.Parallel()
	url := startBus(t)
	for _, args := range [][]string{
		{"--nats", url, "submit", "--tool", "noop", "--input", `{not json`},
		{"--nats", url, "submit", "--tool", "no tool", "--input", `{}`},
		{"--nats", url, "submit", "--tool", "noop", "--session", "a.b"},
		{"--nats", url, "submit", "--tool", "noop", "--input", "@/does/not/exist.json"},
		{"--nats", url, "cancel", "--session", "s", "bad id"},
		{"--log-level", "loud", "events"},
	} {
		code, _, errOut := run(t, args...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
		require.Contains(t, errOut, "invalid_input", "%v", args)
	}
}

func TestFailedJobExitsNonZero(t *testing.T) {
	t.Parallel()
	url := startBus(t)
	code, out, _ := run(t, "--nats", url, "submit", "--tool", "sleep", "--input", `{"ms":-3}`, "--wait")
	require.Equal(t, 1, code)
	require.Contains(t, out, `"failed"`)
}

func TestReadAnchors(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "a.txt")
	require.NoError(t, os.WriteFile(f, []byte("# anchors summary\nanchor.nats_js_pub_async 69952 msgs/s\nanchor.asynq_e2e_latency_p50 546 ms\njunk\n"), 0o600))
	a, err := readAnchors(f)
	require.NoError(t, err)
	require.Equal(t, map[string]float64{"nats_js_pub_async": 69952, "asynq_e2e_latency_p50": 546}, a)
}

func TestWorkerRunsCodeExecutionWithoutCredentials(t *testing.T) { //nolint:paralleltest // uses t.Setenv to clear the provider API keys
	for _, k := range []string{"XAI_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "ANTHROPIC_API_KEY"} {
		t.Setenv(k, "")
	}
	srv := testutil.StartJetStream(t)
	g := &globals{prefix: contracts.DefaultPrefix, log: slog.New(slog.DiscardHandler), stdout: io.Discard, stderr: io.Discard}
	nc := srv.Connect(t)
	w, err := newWorker(g, nc, &workerFlags{concurrency: 4, replicas: 1, stopTimeout: time.Second})
	require.NoError(t, err)
	require.Contains(t, w.Tools(), "code_execution")
	require.NoError(t, w.Start(testutil.Context(t, 10*time.Second)))
	defer func() { require.NoError(t, w.Stop(testutil.Context(t, 10*time.Second))) }()

	code, out, _ := run(t, "--nats", srv.ClientURL(), "submit", "--tool", "code_execution", "--input", `{"task":"mean of 1,2,3"}`, "--wait")
	require.Equal(t, 1, code)
	var ev contracts.Event
	require.NoError(t, json.Unmarshal([]byte(out), &ev))
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeMissingCredentials, ev.Data.Error.Code)
	require.Contains(t, string(ev.Data.Error.Details), "missing_xai_api_key")
	require.Equal(t, 1, ev.Data.Attempt, "missing credentials are not retried")
}

func startCodeModeBus(t *testing.T) string {
	t.Helper()
	srv := testutil.StartJetStream(t)
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"), 0o600))
	g := &globals{prefix: contracts.DefaultPrefix, log: slog.New(slog.DiscardHandler), stdout: io.Discard, stderr: io.Discard}
	n, err := newNode(testutil.Context(t, 30*time.Second), g, srv.Connect(t), &workerFlags{concurrency: 8, replicas: 1, stopTimeout: time.Second, snapshotKeyFile: keyFile, builtins: true})
	require.NoError(t, err)
	require.NotNil(t, n.cm)
	require.NoError(t, n.start(testutil.Context(t, 30*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, n.stop(ctx))
	})
	return srv.ClientURL()
}

func TestExecWaitAndRuns(t *testing.T) {
	t.Parallel()
	url := startCodeModeBus(t)
	dir := t.TempDir()
	code := filepath.Join(dir, "plan.ts")
	require.NoError(t, os.WriteFile(code, []byte(`
		interface Echo { n: number }
		const a = await tools.callValue("toolq:core:noop", {n: 20}) as Echo;
		const b = await tools.callValue("toolq:core:noop", {n: 22}) as Echo;
		return a.n + b.n;`), 0o600))
	// No --language: the .ts extension says TypeScript.
	rc, out, errOut := run(t, "--nats", url, "exec", "--code", code, "--session", "cm", "--wait")
	require.Equal(t, 0, rc, errOut)
	var res struct {
		Status    string          `json:"status"`
		Value     json.RawMessage `json:"value"`
		Telemetry struct {
			Resumes int `json:"resumes"`
		} `json:"telemetry"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `42`, string(res.Value))
	require.Equal(t, 2, res.Telemetry.Resumes)
	// Its progress went to stderr, as it happened.
	for _, want := range []string{
		"waiting on 1 call: toolq:core:noop (call_1)", "resuming run", "resumed (resume 1)",
		"waiting on 1 call: toolq:core:noop (call_2)", "resumed (resume 2)",
	} {
		require.Contains(t, errOut, want)
	}
	require.Less(t, strings.Index(errOut, "(call_1)"), strings.Index(errOut, "resumed (resume 1)"))
	require.Less(t, strings.Index(errOut, "resumed (resume 1)"), strings.Index(errOut, "(call_2)"))

	// An autoResume run is followed by its events: the same lines, no wait.
	rc, out, errOut = run(t, "--nats", url, "exec", "--code", code, "--session", "cm", "--auto-resume", "--wait")
	require.Equal(t, 0, rc, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.JSONEq(t, `42`, string(res.Value))
	for _, want := range []string{"(call_1)", "resumed (resume 1)", "(call_2)", "resumed (resume 2)"} {
		require.Contains(t, errOut, want)
	}
	require.NotContains(t, errOut, "code_mode.wait")

	// A run left waiting shows in `runs`, and `wait` on a bad id is refused.
	slow := filepath.Join(dir, "slow.js")
	require.NoError(t, os.WriteFile(slow, []byte(`return await tools.callValue("toolq:core:sleep", {ms: 60000});`), 0o600))
	rc, out, errOut = run(t, "--nats", url, "exec", "--code", slow, "--session", "cm")
	require.Equal(t, 0, rc, errOut)
	var w struct {
		Status string `json:"status"`
		RunID  string `json:"runId"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &w), out)
	require.Equal(t, "waiting", w.Status)
	rc, out, errOut = run(t, "--nats", url, "--json", "runs", "--session", "cm")
	require.Equal(t, 0, rc, errOut)
	require.Contains(t, out, w.RunID)
	rc, out, _ = run(t, "--nats", url, "wait", "--session", "cm", "nope")
	require.Equal(t, 1, rc)
	require.Contains(t, out, "unavailable or expired")
	rc, _, errOut = run(t, "--nats", url, "cancel", "--session", "cm", w.RunID)
	require.Equal(t, 0, rc, errOut)
}

func TestProviderBreakerOpensAndIsPublished(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		http.Error(w, `{"error":"overloaded"}`, http.StatusServiceUnavailable)
	}))
	defer api.Close()
	cfgFile := filepath.Join(t.TempDir(), "providers.json")
	require.NoError(t, os.WriteFile(cfgFile, []byte(fmt.Sprintf(`{
		"providers": {"xai": {"apiKey": "test-key", "baseUrl": %q}},
		"retry": {"maxAttempts": 1},
		"breaker": {"failures": 2, "openTimeout": 60000000000}
	}`, api.URL)), 0o600))

	srv := testutil.StartJetStream(t)
	nc := srv.Connect(t)
	events := make(chan *nats.Msg, 8)
	sub, err := nc.ChanSubscribe("toolq.system.breakers.>", events)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	g := &globals{prefix: contracts.DefaultPrefix, log: slog.New(slog.DiscardHandler), stdout: io.Discard, stderr: io.Discard}
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	require.NoError(t, err)
	n, err := newNode(testutil.Context(t, 30*time.Second), g, srv.Connect(t), &workerFlags{concurrency: 1, replicas: 1, stopTimeout: time.Second, noCodeMode: true, providersConfig: cfgFile, obs: m})
	require.NoError(t, err)
	require.NoError(t, n.start(testutil.Context(t, 10*time.Second)))
	defer func() { require.NoError(t, n.stop(testutil.Context(t, 10*time.Second))) }()

	for i := range 2 {
		code, out, _ := run(t, "--nats", srv.ClientURL(), "submit", "--tool", "code_execution", "--input", `{"task":"t"}`, "--max-attempts", "1", "--wait")
		require.Equal(t, 1, code, "job %d", i)
		var ev contracts.Event
		require.NoError(t, json.Unmarshal([]byte(out), &ev))
		require.Equal(t, contracts.CodeProviderUnavailable, ev.Data.Error.Code)
	}
	select {
	case m := <-events:
		var ce struct {
			Type string `json:"type"`
			Data struct {
				Provider, To string
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal(m.Data, &ce))
		require.Equal(t, "toolq.provider.breaker_changed", ce.Type)
		require.Equal(t, "xai", ce.Data.Provider)
		require.Equal(t, "open", ce.Data.To)
	case <-time.After(10 * time.Second):
		t.Fatal("no breaker event")
	}
	require.Equal(t, int32(2), hits.Load())
	// The breaker's gauge says open (2).
	fams, err := reg.Gather()
	require.NoError(t, err)
	var state float64 = -1
	for _, f := range fams {
		if f.GetName() == "toolq_provider_breaker_state" {
			for _, mt := range f.GetMetric() {
				state = mt.GetGauge().GetValue()
				require.Equal(t, "xai", mt.GetLabel()[1].GetValue()) // labels sorted: model, provider
			}
		}
	}
	require.InDelta(t, 2, state, 0)
	// While the breaker is open the worker stops pulling code_execution jobs.
	code, _, _ := run(t, "--nats", srv.ClientURL(), "--timeout", "1s", "submit", "--tool", "code_execution", "--input", `{"task":"t"}`, "--wait")
	require.Equal(t, 1, code)
	require.Equal(t, int32(2), hits.Load(), "no request while the breaker is open")
}

func TestPolicyArg(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"security":"deny"}`), 0o600))
	for _, arg := range []string{`{"security":"deny"}`, ` {"security":"deny"}`, file, "@" + file} {
		data, err := policyArg(arg)
		require.NoError(t, err, arg)
		require.JSONEq(t, `{"security":"deny"}`, string(data), arg)
	}
	_, err := policyArg(filepath.Join(dir, "missing.json"))
	require.ErrorContains(t, err, "--exec-policy takes inline JSON, @file or a file path")
}

func TestPrintJSONDoesNotEscapeHTML(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	g := &globals{stdout: &out}
	require.NoError(t, g.printJSON(map[string]string{"m": "a <b> & c"}))
	require.Contains(t, out.String(), `"a <b> & c"`)
}

// TestExecWaitTellsApprovalPending: a code-mode run whose exec call needs a
// person says so on stderr while it waits, with the approval id and the
// commands that decide it; deciding it ends the run.
func TestExecWaitTellsApprovalPending(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(keyFile, []byte(strings.Repeat("ab", 32)), 0o600))
	seed := filepath.Join(dir, "approver.seed")
	g := &globals{prefix: contracts.DefaultPrefix, log: slog.New(slog.DiscardHandler), stdout: io.Discard, stderr: io.Discard}
	f := &workerFlags{concurrency: 8, replicas: 1, stopTimeout: time.Second, snapshotKeyFile: keyFile, codeModeExec: true}
	f.exec.approverSeed = seed
	n, err := newNode(testutil.Context(t, 30*time.Second), g, srv.Connect(t), f)
	require.NoError(t, err)
	require.NoError(t, n.start(testutil.Context(t, 30*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, n.stop(ctx))
	})
	url := srv.ClientURL()
	plan := filepath.Join(dir, "plan.js")
	require.NoError(t, os.WriteFile(plan, []byte(`return await tools.callValue("toolq:core:exec", {command: "uname -s"});`), 0o600))

	var out, errb testutil.LockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- mainIO([]string{"--nats", url, "exec", "--code", plan, "--tools", "toolq:core:exec", "--session", "cm", "--auto-resume", "--wait"}, strings.NewReader(""), &out, &errb)
	}()
	const tell = "call call_1 (toolq:core:exec) waiting for approval: "
	require.Eventually(t, func() bool { return strings.Contains(errb.String(), tell) }, 20*time.Second, 20*time.Millisecond)
	rest := errb.String()[strings.Index(errb.String(), tell)+len(tell):]
	id := strings.Fields(rest)[0]
	require.Contains(t, rest, "toolq approve "+id)
	require.Contains(t, rest, "toolq deny "+id)
	require.Empty(t, out.String(), "stdout holds only the result")

	code, _, errOut := run(t, "--nats", url, "deny", id, "--seed-file", seed, "--reason", "not today")
	require.Equal(t, 0, code, errOut)
	select {
	case code = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("exec --wait did not end after the denial")
	}
	require.Equal(t, 1, code, errb.String())
	var res contracts.CodeModeResult
	require.NoError(t, json.Unmarshal([]byte(out.String()), &res), out.String())
	require.Equal(t, contracts.CodeModeFailed, res.Status)
	require.Contains(t, res.Error, "not today")
	require.Contains(t, errb.String(), "resumed (resume 1)")
}

// TestBenchPrintsPhasesOnStderr: a person sees what bench is doing; stdout
// keeps only the figures.
func TestBenchPrintsPhasesOnStderr(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "bench", "--jobs", "200", "--submitters", "4", "--concurrency", "16", "--latency-jobs", "5", "--latency-interval", "0s")
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{"bench: starting an embedded server", "bench: warming up", "bench: throughput: 200 jobs from 4 submitters", "bench: latency: 5 jobs", "bench: done"} {
		require.Contains(t, errOut, want)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		require.True(t, strings.HasPrefix(line, "bench."), "stdout line %q", line)
	}
	require.Contains(t, out, "bench.e2e_throughput ")
}

// TestBenchCPUProfiles: --cpuprofile and --cpuprofile-batch each write a
// pprof CPU profile (gzipped, with its sample types), and a profile that
// cannot be written is refused before the run.
func TestBenchCPUProfiles(t *testing.T) { //nolint:paralleltest // CPU profiling is one per process
	dir := t.TempDir()
	tp, bp := filepath.Join(dir, "throughput.pprof"), filepath.Join(dir, "batch.pprof")
	code, out, errOut := run(t, "bench", "--jobs", "300", "--submitters", "4", "--concurrency", "16", "--latency-jobs", "0",
		"--batch-window", "16", "--cpuprofile", tp, "--cpuprofile-batch", bp)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "bench.batch_submit_rate ")
	for _, p := range []string{tp, bp} {
		fh, err := os.Open(p) //nolint:gosec // G304: the test's own file
		require.NoError(t, err)
		zr, err := gzip.NewReader(fh)
		require.NoError(t, err, p)
		data, err := io.ReadAll(zr)
		require.NoError(t, err, p)
		require.NoError(t, fh.Close())
		require.Contains(t, string(data), "nanoseconds", p)
	}
	code, _, errOut = run(t, "bench", "--jobs", "10", "--cpuprofile", filepath.Join(dir, "missing", "p.pprof"))
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "cpu profile")
}
