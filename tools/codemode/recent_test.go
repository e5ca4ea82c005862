package codemode_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/tools/codemode"
)

// A result that comes back to the worker that suspended its run takes the
// run with a write at the revision that worker wrote, without reading the
// record first; when the record moved on since (another writer), the write
// is refused and the record read, and the run still ends once, with the
// result.
func TestResultTakesTheRunFromTheWorkersOwnCopy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// No sweep during the test: it reads records of its own.
	b.startWorker(t, "A", &codemode.Config{SweepInterval: time.Hour}, nil)
	ctx := testutil.Context(t, 20*time.Second)
	require.NoError(t, b.prod.RegisterClientTool(ctx, contracts.CatalogTool{ID: "client:app:ask", Name: "ask", Description: "Ask the user."}))

	nc := b.srv.Connect(t)
	// A synchronous subscription: once a Flush returns, every request
	// routed before it is queued here (a callback could still be pending).
	api, err := nc.SubscribeSync("$JS.API.>")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	// reads counts the record reads routed since it was last called.
	reads := func() int {
		require.NoError(t, nc.Flush())
		n := 0
		for {
			queued, _, err := api.Pending()
			require.NoError(t, err)
			if queued == 0 {
				return n
			}
			m, err := api.NextMsg(time.Second)
			require.NoError(t, err)
			// A run record's (the sweep's claim entry is no run's).
			if (strings.HasPrefix(m.Subject, "$JS.API.DIRECT.GET.KV_toolq_runs") || strings.HasPrefix(m.Subject, "$JS.API.STREAM.MSG.GET.KV_toolq_runs")) && !strings.HasSuffix(m.Subject, ".toolq_runs._sweep") {
				n++
			}
		}
	}

	suspend := func() (*contracts.Job, contracts.CodeModePendingToolCall) {
		job := b.exec(t, `const a = await tools.callValue("client:app:ask", {q: 1}); return a + 1;`, map[string]any{"autoResume": true}, nil)
		ev := b.await(t, job, true)
		require.Equal(t, contracts.StatusWaiting, ev.Data.Status)
		var w contracts.CodeModeResult
		require.NoError(t, json.Unmarshal(ev.Data.Result, &w))
		require.Len(t, w.PendingToolCalls, 1)
		return job, w.PendingToolCalls[0]
	}
	answer := func(job *contracts.Job, p contracts.CodeModePendingToolCall, v int) {
		require.NoError(t, b.prod.SubmitToolResult(ctx, job.Session, job.ID, p, json.RawMessage(strconv.Itoa(v)), nil))
		final := b.await(t, job, false) //nolint:contextcheck // the bundle's helpers make their own contexts
		require.Equal(t, contracts.StatusCompleted, final.Data.Status, string(final.Data.Result))
		require.JSONEq(t, strconv.Itoa(v+1), string(result(t, final.Data.Result).Value))
	}

	job, p := suspend()
	reads()
	answer(job, p, 4)
	require.Zero(t, reads(), "the suspending worker read the record it wrote")

	// Another writer moves the record on after the worker wrote it.
	job, p = suspend()
	kv, err := testutil.JetStream(t, nc).KeyValue(ctx, "toolq_runs")
	require.NoError(t, err)
	e, err := kv.Get(ctx, job.Session+"."+job.ID)
	require.NoError(t, err)
	_, err = kv.Update(ctx, e.Key(), e.Value(), e.Revision())
	require.NoError(t, err)
	reads()
	answer(job, p, 6)
	require.Positive(t, reads(), "an out-of-date copy was acted on without reading the record")
}
