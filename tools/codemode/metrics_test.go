package codemode_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/metrics"
	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/tools/codemode"
)

// TestMetricsCountSuspendAndResume: a run that suspends on a nested call
// and auto-resumes moves the suspend, resume and snapshot-size series.
func TestMetricsCountSuspendAndResume(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	require.NoError(t, err)
	b := setup(t)
	b.startWorker(t, "A", &codemode.Config{Observer: m.CodeMode()}, nil)
	job := b.exec(t, `const r = await tools.callValue("toolq:core:noop", {x: 1}); return r.x;`, map[string]any{"autoResume": true}, nil)
	final := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, final.Data.Status, string(final.Data.Result))

	fams, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]*dto.Metric{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			key := f.GetName()
			for _, lp := range mt.GetLabel() {
				key += "," + lp.GetName() + "=" + lp.GetValue()
			}
			got[key] = mt
		}
	}
	require.InDelta(t, 1, got["toolq_codemode_suspends_total"].GetCounter().GetValue(), 0)
	require.InDelta(t, 1, got["toolq_codemode_resumes_total,from=restored"].GetCounter().GetValue(), 0)
	require.Nil(t, got["toolq_codemode_resumes_total,from=replayed"])
	h := got["toolq_codemode_snapshot_bytes"].GetHistogram()
	require.Equal(t, uint64(1), h.GetSampleCount())
	require.Greater(t, h.GetSampleSum(), 1024.0)
}

// TestMetricsCountStoredRuns: the stored-runs gauge follows the runs
// bucket by tenant: two runs of the default tenant wait on a client tool,
// then both are answered and the count goes back to 0.
func TestMetricsCountStoredRuns(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	require.NoError(t, err)
	b := setup(t)
	b.startWorker(t, "A", &codemode.Config{Observer: m.CodeMode(), RunsScanInterval: 100 * time.Millisecond, SweepInterval: 100 * time.Millisecond}, nil)
	ctx := testutil.Context(t, 30*time.Second)
	require.NoError(t, b.prod.RegisterClientTool(ctx, contracts.CatalogTool{ID: "client:app:ask", Name: "ask", Description: "Ask."}))
	stored := func() (float64, bool) {
		fams, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range fams {
			if f.GetName() == "toolq_codemode_runs_stored" {
				for _, mt := range f.GetMetric() {
					if mt.GetLabel()[0].GetValue() == "" {
						return mt.GetGauge().GetValue(), true
					}
				}
			}
		}
		return 0, false
	}
	var calls []struct {
		job *contracts.Job
		p   contracts.CodeModePendingToolCall
	}
	for range 2 {
		job := b.exec(t, `return await tools.callValue("client:app:ask", {});`, map[string]any{"autoResume": true}, nil)
		ev := b.await(t, job, true)
		require.Equal(t, contracts.StatusWaiting, ev.Data.Status, "%s %+v", ev.Data.Result, ev.Data.Error)
		var w contracts.CodeModeResult
		require.NoError(t, json.Unmarshal(ev.Data.Result, &w))
		require.Len(t, w.PendingToolCalls, 1)
		calls = append(calls, struct {
			job *contracts.Job
			p   contracts.CodeModePendingToolCall
		}{job, w.PendingToolCalls[0]})
	}
	require.Eventually(t, func() bool { n, _ := stored(); return n == 2 }, 10*time.Second, 50*time.Millisecond, "two runs wait")
	for _, c := range calls {
		require.NoError(t, b.prod.SubmitToolResult(ctx, c.job.Session, c.job.ID, c.p, json.RawMessage(`"yes"`), nil))
		require.Equal(t, contracts.StatusCompleted, b.await(t, c.job, false).Data.Status)
	}
	require.Eventually(t, func() bool { n, ok := stored(); return ok && n == 0 }, 10*time.Second, 50*time.Millisecond, "none once both ended (their markers gone)")
}

// poolRecorder passes the engine's figures on to the metrics and keeps the
// most VMs it was told were in use at once.
type poolRecorder struct {
	*metrics.CodeMode
	mu       sync.Mutex
	maxInUse int
}

func (r *poolRecorder) VMPool(idle, inUse int) {
	r.mu.Lock()
	r.maxInUse = max(r.maxInUse, inUse)
	r.mu.Unlock()
	r.CodeMode.VMPool(idle, inUse)
}

// TestMetricsVMPoolAndRestores: with the metrics as the engine's observer,
// a run takes a VM (in use 1) and gives it back to the pool (idle 1, in
// use 0); a run that suspends on a nested call and auto-resumes counts one
// snapshot restore and its duration.
func TestMetricsVMPoolAndRestores(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	require.NoError(t, err)
	rec := &poolRecorder{CodeMode: m.CodeMode()}
	eng, err := sandbox.NewEngine(context.Background(), &sandbox.EngineConfig{
		SnapshotKey: []byte("test-key-0123456789abcdef0123456789abcdef"), PoolSize: 2, Observer: rec,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	b := setup(t)
	b.startWorker(t, "A", &codemode.Config{Engine: eng, Observer: m.CodeMode()}, nil)
	gauge := func(name string) float64 {
		fams, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range fams {
			if f.GetName() == name {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("no series %s", name)
		return 0
	}
	restores := func() (float64, uint64) {
		fams, err := reg.Gather()
		require.NoError(t, err)
		var n float64
		var count uint64
		for _, f := range fams {
			switch f.GetName() {
			case "toolq_codemode_restores_total":
				n = f.GetMetric()[0].GetCounter().GetValue()
			case "toolq_codemode_restore_duration_seconds":
				count = f.GetMetric()[0].GetHistogram().GetSampleCount()
			}
		}
		return n, count
	}

	job := b.exec(t, `return 1 + 1;`, nil, nil)
	require.Equal(t, contracts.StatusCompleted, b.await(t, job, false).Data.Status)
	rec.mu.Lock()
	require.Equal(t, 1, rec.maxInUse, "the run held a VM")
	rec.mu.Unlock()
	// The VM is given back before the run's result is published.
	require.InDelta(t, 0, gauge("toolq_codemode_vm_pool_in_use"), 0)
	require.InDelta(t, 1, gauge("toolq_codemode_vm_pool_idle"), 0, "the VM went back to the pool")
	n, count := restores()
	require.InDelta(t, 0, n, 0, "no resume yet")
	require.Zero(t, count)

	job = b.exec(t, `const r = await tools.callValue("toolq:core:noop", {x: 1}); return r.x;`, map[string]any{"autoResume": true}, nil)
	final := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, final.Data.Status, string(final.Data.Result))
	n, count = restores()
	require.InDelta(t, 1, n, 0, "one resume restored its snapshot")
	require.Equal(t, uint64(1), count)
	require.InDelta(t, 0, gauge("toolq_codemode_vm_pool_in_use"), 0)
	require.InDelta(t, 1, gauge("toolq_codemode_vm_pool_idle"), 0, "exec and resume each took the one warm VM and gave it back")
}
