package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/examples/internal/exampletest"
	"github.com/toolq/toolq/internal/testutil"
)

// expected is what analysisCode computes for input i, in Go.
func expected(i int) (sum, minV, maxV int) {
	x := i%2147483646 + 1
	minV = 1 << 30
	for range 64 {
		x = x * 48271 % 2147483647
		v := x % 1000
		sum += v
		minV, maxV = min(minV, v), max(maxV, v)
	}
	return sum, minV, maxV
}

// TestPipelineSurvivesAKill: a run killed halfway (its context cancelled
// once half the inputs were submitted, then its state file lost as if it
// died before saving it) is taken up by a second run, which ends with
// exactly one result per input; no job was enqueued or run twice; a third
// run submits nothing and collects everything again.
func TestPipelineSurvivesAKill(t *testing.T) {
	t.Parallel()
	const n = 500
	srv := testutil.StartJetStream(t)
	obs := &exampletest.Deliveries{}
	exampletest.StartWorker(t, srv.Connect(t), &exampletest.Config{Observer: obs})
	state := filepath.Join(t.TempDir(), "batch.state")
	cfg := Config{NATS: srv.ClientURL(), Inputs: n, Batch: "nightly", Session: "pipeline", StateFile: state}

	// 1. Killed halfway.
	ctx, cancel := context.WithCancel(testutil.Context(t, 2*time.Minute))
	first := cfg
	first.Progress = func(p Progress) {
		if p.Submitted >= n/2 {
			cancel()
		}
	}
	sum, err := Run(ctx, first)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, len(sum.Results), n, "the first run was cut short")
	firstSubmitted := sum.Submitted
	require.Positive(t, firstSubmitted)
	// Worst case: it died before writing its state at all.
	require.NoError(t, os.Remove(state))

	// 2. The rerun takes it up.
	sum, err = Run(testutil.Context(t, 2*time.Minute), cfg)
	require.NoError(t, err)
	require.Equal(t, n, sum.Skipped+sum.Submitted+sum.Duplicates, "every input was skipped, submitted or found on the bus")
	require.LessOrEqual(t, sum.Submitted, n-firstSubmitted, "nothing the first run submitted is submitted again")
	require.Len(t, sum.Results, n)
	for i, r := range sum.Results {
		require.Equal(t, i, r.Index)
		require.Equal(t, JobID("nightly", i), r.JobID)
		require.Equal(t, contracts.StatusCompleted, r.Status, r.Error)
		var v struct{ Input, N, Sum, Min, Max int }
		require.NoError(t, json.Unmarshal(r.Value, &v))
		s, lo, hi := expected(i)
		require.Equal(t, struct{ Input, N, Sum, Min, Max int }{i, 64, s, lo, hi}, v)
	}

	// No job ran twice, and the jobs stream took each job once.
	require.Equal(t, int64(n), obs.Of(contracts.ToolCodeModeExec), "one delivery per input")
	js := testutil.JetStream(t, srv.Connect(t))
	st, err := js.Stream(testutil.Context(t, 5*time.Second), contracts.Subjects{}.JobsStream())
	require.NoError(t, err)
	require.Equal(t, uint64(n), st.CachedInfo().State.LastSeq, "one message per input was ever enqueued")

	// 3. A third run finds everything done: it submits nothing.
	sum, err = Run(testutil.Context(t, time.Minute), cfg)
	require.NoError(t, err)
	require.Equal(t, n, sum.Skipped)
	require.Zero(t, sum.Submitted+sum.Duplicates)
	require.Len(t, sum.Results, n)
	require.Equal(t, int64(n), obs.Of(contracts.ToolCodeModeExec))
}
