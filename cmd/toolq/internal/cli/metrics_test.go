package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/internal/testutil"
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
