package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/worker"
)

// TestOutcomeOverMaxPayloadFailsOnce: an outcome whose event the server
// refuses as larger than its max payload is not retried (running the job
// again would make it again): the job fails with output_limit_exceeded.
func TestOutcomeOverMaxPayloadFailsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("huge_error", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			runs.Add(1)
			return nil, worker.Permanent(contracts.Errorf(contracts.CodeInternalError, "%s", strings.Repeat("y", 9<<20)))
		}), nil))
	})
	ev := b.await(t, b.submit(t, "huge_error", ``, nil))
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeOutputLimitExceeded, ev.Data.Error.Code)
	require.Contains(t, ev.Data.Error.Message, "max payload")
	require.Equal(t, int32(1), runs.Load())
}
