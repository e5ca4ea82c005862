package worker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/worker"
)

func TestDenyEndsTheJobDenied(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("guarded", worker.HandlerFunc(func(_ context.Context, j *contracts.Job) (json.RawMessage, error) {
			calls.Add(1)
			if string(j.Input) == `{"bad":true}` {
				return nil, worker.Deny("not without a result")
			}
			return json.RawMessage(`{"command":"rm -rf /"}`), worker.Deny("security=deny refuses every command")
		}), nil))
	})
	job := b.submit(t, "guarded", `{}`, nil)
	ev := b.await(t, job)
	require.Equal(t, contracts.StatusDenied, ev.Data.Status)
	require.NotNil(t, ev.Data.Error)
	require.Equal(t, contracts.CodeDenied, ev.Data.Error.Code)
	require.Equal(t, "security=deny refuses every command", ev.Data.Error.Message)
	require.JSONEq(t, `{"command":"rm -rf /"}`, string(ev.Data.Result))
	requireQueueEmpty(t, b) // acknowledged, never retried
	require.Equal(t, int32(1), calls.Load())

	job = b.submit(t, "guarded", `{"bad":true}`, nil)
	ev = b.await(t, job)
	require.Equal(t, contracts.StatusDenied, ev.Data.Status)
	require.Empty(t, ev.Data.Result)
	require.Len(t, b.allEvents(t, job.Session), 2)
}
