package shellexec_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/metrics"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/tools/shellexec"
)

// TestMetricsCountApprovals: two commands wait for approval, one is
// approved, one denied; a repeated decision counts nothing.
func TestMetricsCountApprovals(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	require.NoError(t, err)
	b := setup(t, func(c *shellexec.Config) { c.Observer = m.Exec() })

	job, p := b.pending(t, map[string]any{"command": "seq 2"})
	require.True(t, decideResult(t, b.decide(t, p.ApprovalID, shell.Approve, b.seed, nil)).Applied)
	require.Equal(t, contracts.StatusCompleted, b.await(t, job.Session, job.ID, false).Data.Status)
	require.False(t, decideResult(t, b.decide(t, p.ApprovalID, shell.Reject, b.seed, nil)).Applied)
	job, p = b.pending(t, map[string]any{"command": "seq 3"})
	require.True(t, decideResult(t, b.decide(t, p.ApprovalID, shell.Reject, b.seed, nil)).Applied)
	require.Equal(t, contracts.StatusDenied, b.await(t, job.Session, job.ID, false).Data.Status)

	fams, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "toolq_exec_") || f.GetType() != dto.MetricType_COUNTER {
			continue
		}
		for _, mt := range f.GetMetric() {
			key := f.GetName()
			for _, lp := range mt.GetLabel() {
				key += "," + lp.GetName() + "=" + lp.GetValue()
			}
			got[key] = mt.GetCounter().GetValue()
		}
	}
	require.Equal(t, map[string]float64{
		"toolq_exec_approvals_requested_total,tenant=":                2,
		"toolq_exec_approvals_decided_total,tenant=,verdict=approved": 1,
		"toolq_exec_approvals_decided_total,tenant=,verdict=denied":   1,
	}, got)
}

// TestMetricsPendingApprovals: the gauges of waiting approvals follow the
// approvals bucket: two commands wait (the oldest's wait grows), then both
// are decided and the count goes back to 0.
func TestMetricsPendingApprovals(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	require.NoError(t, err)
	b := setup(t, func(c *shellexec.Config) {
		c.Observer = m.Exec()
		c.PendingScanInterval = 100 * time.Millisecond
	})
	gauge := func(name string) (float64, bool) {
		fams, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range fams {
			if f.GetName() != name {
				continue
			}
			for _, mt := range f.GetMetric() {
				if len(mt.GetLabel()) == 1 && mt.GetLabel()[0].GetName() == "tenant" && mt.GetLabel()[0].GetValue() == "" {
					return mt.GetGauge().GetValue(), true
				}
			}
		}
		return 0, false
	}
	_, p1 := b.pending(t, map[string]any{"command": "seq 4"})
	_, p2 := b.pending(t, map[string]any{"command": "seq 5"})
	require.Eventually(t, func() bool {
		n, _ := gauge("toolq_exec_approvals_pending")
		age, _ := gauge("toolq_exec_approvals_oldest_pending_seconds")
		return n == 2 && age > 0.2
	}, 10*time.Second, 50*time.Millisecond, "two approvals wait, the oldest for a while")
	for _, p := range []shellexec.PendingResult{p1, p2} {
		require.True(t, decideResult(t, b.decide(t, p.ApprovalID, shell.Reject, b.seed, nil)).Applied)
	}
	require.Eventually(t, func() bool {
		n, ok := gauge("toolq_exec_approvals_pending")
		age, _ := gauge("toolq_exec_approvals_oldest_pending_seconds")
		return ok && n == 0 && age == 0
	}, 10*time.Second, 50*time.Millisecond, "none waits once both are decided")
}
