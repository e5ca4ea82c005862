package codemode_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/metrics"
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
