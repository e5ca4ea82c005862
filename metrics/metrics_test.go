package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/metrics"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/scheduler"
	"github.com/toolq/toolq/tools/codemode"
	"github.com/toolq/toolq/tools/shellexec"
	"github.com/toolq/toolq/worker"
)

var quiet = slog.New(slog.DiscardHandler)

// gather reads reg's families, by name.
func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	return byName
}

// scrape reads url's exposition and parses it.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	ctx := testutil.Context(t, 10*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/plain") // the text format, parsed below
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// value returns the value of the series of family name whose labels are
// labels (all of them), and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	got := map[string]string{}
	for _, lp := range m.GetLabel() {
		got[lp.GetName()] = lp.GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// TestWorkerMetricsScraped runs real jobs through a worker on an embedded
// server — completed, failed at once, failed then retried to success,
// retried into the DLQ, and some left queued behind a closed gate — and
// reads the figures from the worker's real /metrics endpoint.
func TestWorkerMetricsScraped(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	require.NoError(t, err)

	w, err := worker.New(srv.Connect(t), &worker.Config{
		Builtins: true, Logger: quiet, Observer: m.Worker(), LagInterval: time.Second,
		Tool: worker.ToolConfig{Retry: worker.RetryPolicy{InitialInterval: 10 * time.Millisecond, MaxInterval: 20 * time.Millisecond, RandomizationFactor: -1}},
	})
	require.NoError(t, err)
	var flakyCalls atomic.Int32
	require.NoError(t, w.Register("flaky", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
		if flakyCalls.Add(1) == 1 {
			return nil, errors.New("first attempt fails")
		}
		return json.RawMessage(`"ok"`), nil
	}), nil))
	require.NoError(t, w.Register("broken", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
		return nil, errors.New("always fails")
	}), &worker.ToolConfig{Retry: worker.RetryPolicy{MaxAttempts: 2}}))
	require.NoError(t, w.Register("refused", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
		return nil, worker.Permanent(contracts.Errorf(contracts.CodeInvalidInput, "no"))
	}), nil))
	require.NoError(t, w.Register("gated", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
		return json.RawMessage(`1`), nil
	}), &worker.ToolConfig{Ready: func() bool { return false }}))
	require.NoError(t, w.Start(testutil.Context(t, 10*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})

	ms, err := metrics.Listen("0", reg, quiet)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ms.Stop(context.Background())) })
	require.True(t, strings.HasPrefix(ms.URL(), "http://127.0.0.1:"), ms.URL())

	prod, err := producer.New(srv.Connect(t), &producer.Config{Session: "metrics-session-1", Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	ctx := testutil.Context(t, 30*time.Second)
	ids := map[string]bool{"metrics-session-1": true}
	run := func(tool string, want contracts.Status) {
		job, err := prod.Submit(ctx, tool, json.RawMessage(`{}`), nil)
		require.NoError(t, err)
		ids[job.ID] = true
		ev, err := prod.Await(ctx, job.Session, job.ID, nil)
		require.NoError(t, err)
		require.Equal(t, want, ev.Data.Status, tool)
	}
	run(worker.ToolNoop, contracts.StatusCompleted)
	run(worker.ToolNoop, contracts.StatusCompleted)
	run("flaky", contracts.StatusCompleted)
	run("broken", contracts.StatusFailed)
	run("refused", contracts.StatusFailed)
	for range 3 {
		job, err := prod.Submit(ctx, "gated", json.RawMessage(`{}`), nil)
		require.NoError(t, err)
		ids[job.ID] = true
	}

	// The lag is read on the worker's timer: poll the endpoint until it
	// shows the three gated jobs.
	var fams map[string]*dto.MetricFamily
	require.Eventually(t, func() bool {
		fams = scrape(t, ms.URL())
		v, ok := value(fams, "toolq_consumer_pending", map[string]string{"tool": "gated", "tenant": ""})
		return ok && v == 3
	}, 20*time.Second, 100*time.Millisecond)

	jobs := func(tool, outcome string) float64 {
		v, _ := value(fams, "toolq_jobs_total", map[string]string{"tool": tool, "tenant": "", "outcome": outcome})
		return v
	}
	require.InDelta(t, 2, jobs(worker.ToolNoop, "completed"), 0)
	require.InDelta(t, 1, jobs("flaky", "completed"), 0)
	require.InDelta(t, 1, jobs("broken", "dead_lettered"), 0)
	require.InDelta(t, 0, jobs("broken", "failed"), 0)
	require.InDelta(t, 1, jobs("refused", "failed"), 0)

	counter := func(name, tool string) float64 {
		v, ok := value(fams, name, map[string]string{"tool": tool})
		require.True(t, ok, "%s{tool=%q}", name, tool)
		return v
	}
	require.InDelta(t, 1, counter("toolq_job_retries_total", "flaky"), 0)
	require.InDelta(t, 1, counter("toolq_job_retries_total", "broken"), 0)
	require.InDelta(t, 0, counter("toolq_job_retries_total", worker.ToolNoop), 0)
	require.InDelta(t, 1, counter("toolq_dead_letters_total", "broken"), 0)
	require.InDelta(t, 0, counter("toolq_dead_letters_total", "flaky"), 0)
	// Histograms (sample counts): a duration per delivery, a queue wait per first delivery.
	require.InDelta(t, 2, counter("toolq_job_duration_seconds", "flaky"), 0)
	require.InDelta(t, 2, counter("toolq_job_duration_seconds", "broken"), 0)
	require.InDelta(t, 1, counter("toolq_job_queue_wait_seconds", "flaky"), 0)
	require.InDelta(t, 2, counter("toolq_job_queue_wait_seconds", worker.ToolNoop), 0)
	require.InDelta(t, 0, counter("toolq_jobs_in_flight", worker.ToolNoop), 0)
	v, ok := value(fams, "toolq_consumer_ack_pending", map[string]string{"tool": "gated", "tenant": ""})
	require.True(t, ok)
	require.InDelta(t, 0, v, 0)

	// No label value anywhere is a job id or the session.
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				require.False(t, ids[lp.GetValue()], "%s has label %s=%q, an id", name, lp.GetName(), lp.GetValue())
			}
		}
	}
}

// TestTenantLabelsBounded gives the tenant label to the first MaxTenants
// tenants and OtherTenant to the rest, and sums the lag of the rest.
func TestTenantLabelsBounded(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, &metrics.Config{MaxTenants: 2})
	require.NoError(t, err)
	obs := m.Worker()
	for _, tenant := range []string{"", "acme", "globex", "initech", "umbrella"} {
		to := obs.Tool("noop", tenant)
		to.Started(1, time.Millisecond)
		to.Ended(worker.OutcomeCompleted, time.Millisecond)
	}
	obs.Lag([]worker.ConsumerLag{
		{Tool: "noop", Tenant: "acme", Pending: 1},
		{Tool: "noop", Tenant: "initech", Pending: 2, AckPending: 1},
		{Tool: "noop", Tenant: "umbrella", Pending: 3, AckPending: 1},
	})
	byName := gather(t, reg)
	tenants := map[string]float64{}
	for _, mt := range byName["toolq_jobs_total"].GetMetric() {
		for _, lp := range mt.GetLabel() {
			if lp.GetName() == "tenant" && mt.GetCounter().GetValue() > 0 {
				tenants[lp.GetValue()] += mt.GetCounter().GetValue()
			}
		}
	}
	require.Equal(t, map[string]float64{"": 1, "acme": 1, "globex": 1, metrics.OtherTenant: 2}, tenants)
	v, ok := value(byName, "toolq_consumer_pending", map[string]string{"tool": "noop", "tenant": metrics.OtherTenant})
	require.True(t, ok)
	require.InDelta(t, 5, v, 0)
	v, _ = value(byName, "toolq_consumer_ack_pending", map[string]string{"tool": "noop", "tenant": metrics.OtherTenant})
	require.InDelta(t, 2, v, 0)
}

func TestListenAddr(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"9464":         "127.0.0.1:9464",
		":9464":        "127.0.0.1:9464",
		"0.0.0.0:9464": "0.0.0.0:9464",
		"[::1]:9464":   "[::1]:9464",
	} {
		got, err := metrics.ListenAddr(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "host", "70000", "h:port", "h:99999"} {
		_, err := metrics.ListenAddr(bad)
		require.ErrorIs(t, err, contracts.ErrInvalidInput, bad)
	}
}

// The observers satisfy the hooks of the packages they serve.
var (
	_ worker.Observer    = (&metrics.Metrics{}).Worker()
	_ codemode.Observer  = (*metrics.CodeMode)(nil)
	_ shellexec.Observer = (*metrics.Exec)(nil)
	_ scheduler.Observer = (*metrics.Scheduler)(nil)
)

// TestDLQSizeScraped: a job dead-lettered on an embedded server shows in
// toolq_dlq_messages{tool} and toolq_dlq_bytes once the worker has read the
// DLQ stream on its lag timer; after a purge of the stream both go back to
// 0 (the tool's series stays, at 0).
func TestDLQSizeScraped(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	require.NoError(t, err)
	nc := srv.Connect(t)
	w, err := worker.New(nc, &worker.Config{Logger: quiet, Observer: m.Worker(), LagInterval: time.Second})
	require.NoError(t, err)
	require.NoError(t, w.Register("doomed", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
		return nil, errors.New("always fails")
	}), &worker.ToolConfig{Retry: worker.RetryPolicy{MaxAttempts: 1}}))
	require.NoError(t, w.Start(testutil.Context(t, 10*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})
	prod, err := producer.New(srv.Connect(t), &producer.Config{Session: "dlq-session", Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	ctx := testutil.Context(t, 30*time.Second)

	gauges := func() (messages, bytes float64, ok bool) {
		byName := gather(t, reg)
		msgs, okM := value(byName, "toolq_dlq_messages", map[string]string{"tool": "doomed"})
		b, okB := value(byName, "toolq_dlq_bytes", nil)
		return msgs, b, okM && okB
	}
	// Read before any dead letter: the series are there at 0 or absent.
	msgs, _, _ := gauges()
	require.InDelta(t, 0, msgs, 0)

	job, err := prod.Submit(ctx, "doomed", json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	ev, err := prod.Await(ctx, job.Session, job.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Eventually(t, func() bool {
		msgs, b, ok := gauges()
		return ok && msgs == 1 && b > 0
	}, 20*time.Second, 100*time.Millisecond, "the dead letter is counted")

	var subj contracts.Subjects
	dlq, err := jetstream.New(nc)
	require.NoError(t, err)
	s, err := dlq.Stream(ctx, subj.DLQStream())
	require.NoError(t, err)
	require.NoError(t, s.Purge(ctx))
	require.Eventually(t, func() bool {
		msgs, b, ok := gauges()
		return ok && msgs == 0 && b == 0
	}, 20*time.Second, 100*time.Millisecond, "back to 0 after the purge")
}

// TestQueueExpiredScraped runs a worker with a queue-time limit and a job
// for a tool nobody serves: the sweep dead-letters it and
// toolq_queue_expired_total counts it, under the default tenant's label.
func TestQueueExpiredScraped(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	require.NoError(t, err)
	w, err := worker.New(srv.Connect(t), &worker.Config{Builtins: true, Logger: quiet, Observer: m.Worker(), MaxQueueTime: 200 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, w.Start(testutil.Context(t, 10*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})
	prod, err := producer.New(srv.Connect(t), &producer.Config{Session: "expiry", Logger: quiet, SubmitUnserved: true})
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	ctx := testutil.Context(t, 30*time.Second)

	expired := func() float64 {
		byName := gather(t, reg)
		v, _ := value(byName, "toolq_queue_expired_total", map[string]string{"tenant": ""})
		return v
	}
	require.InDelta(t, 0, expired(), 0)
	expire := func() {
		t.Helper()
		job, err := prod.Submit(ctx, "nobody_serves_this", json.RawMessage(`{}`), nil)
		require.NoError(t, err)
		ev, err := prod.Await(ctx, job.Session, job.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusFailed, ev.Data.Status)
		require.Equal(t, contracts.CodeRuntimeUnavailable, ev.Data.Error.Code)
	}
	expire()
	expire()
	// The counter moves right after the failed event is stored, so it may
	// trail the Await by a moment.
	require.Eventually(t, func() bool { return expired() == 2 }, 5*time.Second, 20*time.Millisecond)
	// A third job needs sweeps after the first two were counted: they must
	// not count those again.
	expire()
	require.Eventually(t, func() bool { return expired() >= 3 }, 5*time.Second, 20*time.Millisecond)
	require.InDelta(t, 3, expired(), 0, "each expired job counted once")
}
