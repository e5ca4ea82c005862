package main

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/examples/internal/exampletest"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/scheduler"
	"github.com/toolq/toolq/tools/codeexec/demo"
)

// TestBackendOnAsynq: the service enqueues toolq:submit tasks in a real
// Redis; toolq's asynq engine turns them into code_execution jobs run by a
// worker against the demo provider; the service reads every report from its
// task's result. Asking again for the same night enqueues nothing and runs
// nothing: it reads the same results.
func TestBackendOnAsynq(t *testing.T) {
	t.Parallel()
	const shops = 4
	srv := testutil.StartJetStream(t)
	nc := srv.Connect(t)
	obs := &exampletest.Deliveries{}
	exampletest.StartWorker(t, nc, &exampletest.Config{DemoProvider: true, Observer: obs})
	r := testutil.StartRedis(t)
	e, err := scheduler.NewAsynq(nc, &scheduler.AsynqConfig{Redis: asynq.RedisClientOpt{Addr: r.Addr()}, Logger: exampletest.Quiet})
	require.NoError(t, err)
	require.NoError(t, e.Start(testutil.Context(t, 10*time.Second)))
	t.Cleanup(func() { _ = e.Stop(context.Background()) })

	cfg := Config{Redis: r.URL(), Reports: shops, Day: "20260101", Session: "orders-backend", Poll: 50 * time.Millisecond}
	reports, err := Run(testutil.Context(t, time.Minute), cfg)
	require.NoError(t, err)
	require.Len(t, reports, shops)
	for i, rep := range reports {
		require.Equal(t, i, rep.Shop)
		require.True(t, rep.Enqueued)
		require.Equal(t, contracts.StatusCompleted, rep.Status, rep.Error)
		require.Contains(t, rep.Content, demo.Label)
	}
	require.Equal(t, int64(shops), obs.Of(contracts.ToolCodeExecution))

	// The jobs are toolq jobs like any other, in the service's session,
	// under the task ids.
	p, err := producer.New(nc, &producer.Config{Logger: exampletest.Quiet})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	ev, err := p.Await(testutil.Context(t, 5*time.Second), "orders-backend", "report-20260101-2", nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	require.Equal(t, "2", ev.Data.Meta["shop"])

	// The same night again: nothing enqueued, nothing run, the same reports.
	again, err := Run(testutil.Context(t, time.Minute), cfg)
	require.NoError(t, err)
	for i, rep := range again {
		require.False(t, rep.Enqueued)
		require.Equal(t, reports[i].Content, rep.Content)
	}
	require.Equal(t, int64(shops), obs.Of(contracts.ToolCodeExecution))
}
