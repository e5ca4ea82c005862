package worker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

func TestCatalogRegistration(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, withBuiltins, func(w *worker.Worker) {
		require.NoError(t, w.Register("shipping.list", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			return json.RawMessage(`[]`), nil
		}), &worker.ToolConfig{Catalog: &contracts.CatalogTool{Description: "List shipments.", SideEffects: false}}))
		require.NoError(t, w.Register("hidden", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			return nil, nil
		}), nil))
	})
	ctx := testutil.Context(t, 5*time.Second)
	kv, err := b.js.KeyValue(ctx, "toolq_catalog")
	require.NoError(t, err)
	entry, err := kv.Get(ctx, "toolq.core.shipping_list")
	require.NoError(t, err)
	var ct contracts.CatalogTool
	require.NoError(t, json.Unmarshal(entry.Value(), &ct))
	require.Equal(t, "toolq:core:shipping_list", ct.ID)
	require.Equal(t, "shipping.list", ct.Tool)
	require.Equal(t, contracts.SourceToolq, ct.Source)
	require.Equal(t, "List shipments.", ct.Description)
	_, err = kv.Get(ctx, "toolq.core.noop")
	require.NoError(t, err, "built-ins are in the catalog")
	_, err = kv.Get(ctx, "toolq.core.hidden")
	require.Error(t, err, "a tool without catalog info stays out")
}

func TestReadyGatesPulling(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ready atomic.Bool
	var runs atomic.Int32
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("gated", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			runs.Add(1)
			return json.RawMessage(`true`), nil
		}), &worker.ToolConfig{Ready: ready.Load, ReadyInterval: 20 * time.Millisecond}))
	})
	job := b.submit(t, "gated", ``, nil)
	require.Never(t, func() bool { return runs.Load() > 0 }, 500*time.Millisecond, 20*time.Millisecond)
	ready.Store(true)
	require.Equal(t, contracts.StatusCompleted, b.await(t, job).Data.Status)
	ready.Store(false)
	// Paused once no pull request is outstanding for a while: the last
	// pull ends on its own (within a fraction of the stop timeout), and
	// between two pulls the count is 0 for a moment too.
	quiet := 0
	require.Eventually(t, func() bool {
		st, err := b.js.Consumer(testutil.Context(t, time.Second), "TOOLQ_JOBS", "worker_gated")
		if err == nil && st.CachedInfo().NumWaiting == 0 {
			quiet++
		} else {
			quiet = 0
		}
		return quiet >= 15
	}, 10*time.Second, 20*time.Millisecond, "paused: no pull requests outstanding")
	job2 := b.submit(t, "gated", ``, nil)
	require.Never(t, func() bool { return runs.Load() > 1 }, 300*time.Millisecond, 20*time.Millisecond)
	ready.Store(true)
	require.Equal(t, contracts.StatusCompleted, b.await(t, job2).Data.Status)
}

// A nested call's end goes to the continuation its parent names, as a
// ToolResult job; a parent without one (queued by an older producer) reports
// to code mode, as every nested call did before.
func TestNestedJobReportsToParentRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got := make(chan contracts.ToolResult, 4)
	legacy := make(chan contracts.ToolResult, 4)
	collect := func(ch chan contracts.ToolResult) worker.HandlerFunc {
		return func(_ context.Context, j *contracts.Job) (json.RawMessage, error) {
			var tr contracts.ToolResult
			require.NoError(t, json.Unmarshal(j.Input, &tr))
			ch <- tr
			return nil, nil
		}
	}
	b.startWorker(t, &worker.Config{Builtins: true}, func(w *worker.Worker) {
		require.NoError(t, w.Register("batch.result", collect(got), nil))
		require.NoError(t, w.Register(contracts.ToolCodeModeResult, collect(legacy), nil))
	})
	receive := func(ch chan contracts.ToolResult) contracts.ToolResult {
		t.Helper()
		select {
		case tr := <-ch:
			require.NoError(t, tr.Validate())
			return tr
		case <-time.After(10 * time.Second):
			t.Fatal("no tool result")
			return contracts.ToolResult{}
		}
	}
	parent := &contracts.Parent{RunID: "run1", CallID: "c1", Tool: "batch.result", Token: "tok-of-c1"}
	job := b.submit(t, worker.ToolNoop, `{"v":42}`, &producer.SubmitOpts{Parent: parent})
	tr := receive(got)
	require.Equal(t, "run1", tr.RunID)
	require.Equal(t, "c1", tr.CallID)
	require.Equal(t, "tok-of-c1", tr.Token, "the report echoes the call's token")
	require.Equal(t, job.ID, tr.JobID)
	require.Equal(t, contracts.StatusCompleted, tr.Status)
	require.JSONEq(t, `{"v":42}`, string(tr.Result))

	failing := b.submit(t, worker.ToolSleep, `{"ms":-1}`, &producer.SubmitOpts{Parent: &contracts.Parent{RunID: "run1", CallID: "c2", Tool: "batch.result"}})
	tr = receive(got)
	require.Equal(t, failing.ID, tr.JobID)
	require.Equal(t, contracts.StatusFailed, tr.Status)
	require.Equal(t, contracts.CodeInvalidInput, tr.Error.Code)

	old := b.submit(t, worker.ToolNoop, `1`, &producer.SubmitOpts{Parent: &contracts.Parent{RunID: "run2", CallID: "c1"}})
	tr = receive(legacy)
	require.Equal(t, old.ID, tr.JobID)
	require.Equal(t, "run2", tr.RunID)
	require.Empty(t, got)
}
