package shellexec_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
		if !strings.HasPrefix(f.GetName(), "toolq_exec_") {
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
