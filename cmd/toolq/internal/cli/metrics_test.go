package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/metrics"
)

// TestWorkerServesMetricsAndLogsJSON runs `toolq worker --metrics-listen
// --log-format json`, sends it a completed and a failed job, reads the
// counts from its /metrics page, and finds every stderr line to be a JSON
// record, the failed job's naming its job and tool.
func TestWorkerServesMetricsAndLogsJSON(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	url := srv.ClientURL()
	port := testutil.FreePort(t)
	var out bytes.Buffer
	errb := &testutil.LockedBuffer{}
	root, _ := newRoot(&out, errb)
	root.SetArgs([]string{
		"--nats", url, "--log-format", "json", "worker", "--builtins", "--no-code-mode",
		"--stop-timeout", "2s", "--metrics-listen", fmt.Sprint(port),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			if err := <-done; err != nil {
				t.Log("worker:", err)
			}
		}
	}()

	// The worker is up once its noop job completes.
	require.Eventually(t, func() bool {
		code, _, _ := run(t, "--nats", url, "--timeout", "2s", "submit", "--tool", "noop", "--input", `{}`, "--session", "m", "--wait")
		return code == 0
	}, 30*time.Second, 100*time.Millisecond)
	// Ready once started and connected: the noop job can complete while
	// the worker still makes the consumers of its other tools and levels
	// (sleep's among them).
	require.Eventually(t, func() bool {
		req, err := http.NewRequestWithContext(testutil.Context(t, 5*time.Second), http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/readyz", port), nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && string(b) == "ready\n"
	}, 20*time.Second, 50*time.Millisecond, "never ready")
	code, _, _ := run(t, "--nats", url, "submit", "--tool", "sleep", "--input", `{"ms":-1}`, "--session", "m", "--id", "bad-sleep", "--wait")
	require.Equal(t, 1, code)

	page := scrapeText(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	// At least the one that answered: a try that timed out on a loaded
	// machine may have completed its job after it gave up.
	m := regexp.MustCompile(`toolq_jobs_total\{outcome="completed",tenant="",tool="noop"\} (\d+)`).FindStringSubmatch(page)
	require.NotNil(t, m, "no completed noop count")
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	require.Positive(t, n)
	require.Contains(t, page, `toolq_jobs_total{outcome="failed",tenant="",tool="sleep"} 1`)
	require.Contains(t, page, "go_goroutines")
	require.NotContains(t, page, "bad-sleep")
	require.Equal(t, "ok\n", scrapeText(t, fmt.Sprintf("http://127.0.0.1:%d/healthz", port)))

	cancel()
	stopped = true
	require.NoError(t, <-done, errb.String())
	var sawJob bool
	sc := bufio.NewScanner(strings.NewReader(errb.String()))
	for sc.Scan() {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec), "not a JSON log line: %s", sc.Text())
		if rec["msg"] == "job failed permanently" {
			require.Equal(t, "bad-sleep", rec["job"])
			require.Equal(t, "sleep", rec["tool"])
			sawJob = true
		}
	}
	require.True(t, sawJob, errb.String())
}

func scrapeText(t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(testutil.Context(t, 10*time.Second), http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestLogFormatRefusesUnknown(t *testing.T) {
	t.Parallel()
	code, _, errOut := run(t, "--log-format", "xml", "submit", "--tool", "noop", "--input", "{}")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--log-format")
}

func TestMetricsListenRefusesBadAddress(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	code, _, errOut := run(t, "--nats", srv.ClientURL(), "scheduler", "--metrics-listen", "nope")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--metrics-listen")
}

// TestWorkerWiresEngineAndDLQMetrics: a worker node built with metrics
// gives them to the sandbox engine and reads the DLQ's size: after a
// code-mode run that suspends on a nested call and auto-resumes, the
// registry has the VM pool's gauges (the VMs back in the pool, none in
// use), a snapshot restore, and the DLQ's figures (empty).
func TestWorkerWiresEngineAndDLQMetrics(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	require.NoError(t, err)
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"), 0o600))
	g := &globals{prefix: contracts.DefaultPrefix, log: slog.New(slog.DiscardHandler), stdout: io.Discard, stderr: io.Discard}
	n, err := newNode(testutil.Context(t, 30*time.Second), g, srv.Connect(t), &workerFlags{
		concurrency: 8, replicas: 1, stopTimeout: time.Second, snapshotKeyFile: keyFile, builtins: true, obs: m,
	})
	require.NoError(t, err)
	require.NoError(t, n.start(testutil.Context(t, 30*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, n.stop(ctx))
	})
	code := filepath.Join(t.TempDir(), "plan.js")
	require.NoError(t, os.WriteFile(code, []byte(`return (await tools.callValue("toolq:core:noop", {n: 1})).n;`), 0o600))
	rc, out, errOut := run(t, "--nats", srv.ClientURL(), "exec", "--code", code, "--session", "wired", "--auto-resume", "--wait")
	require.Equal(t, 0, rc, errOut)
	require.Contains(t, out, `"completed"`)

	series := func() map[string]float64 {
		fams, err := reg.Gather()
		require.NoError(t, err)
		got := map[string]float64{}
		for _, f := range fams {
			for _, mt := range f.GetMetric() {
				switch {
				case mt.Gauge != nil:
					got[f.GetName()] += mt.GetGauge().GetValue()
				case mt.Counter != nil:
					got[f.GetName()] += mt.GetCounter().GetValue()
				}
			}
		}
		return got
	}
	got := series()
	// At least once: a resume whose lease write lost to the run's own
	// "calls submitted" write throws its slice away and restores again.
	require.GreaterOrEqual(t, got["toolq_codemode_restores_total"], 1.0, "the resume restored its snapshot")
	require.Contains(t, got, "toolq_codemode_vm_pool_idle")
	require.Positive(t, got["toolq_codemode_vm_pool_idle"], "the VMs went back to the pool")
	require.InDelta(t, 0, got["toolq_codemode_vm_pool_in_use"], 0)
	// The DLQ is read by the worker's lag loop, first as it starts.
	require.Eventually(t, func() bool {
		v, ok := series()["toolq_dlq_bytes"]
		return ok && v == 0
	}, 10*time.Second, 50*time.Millisecond, "the DLQ's size is read")
}
