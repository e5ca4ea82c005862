package codemode_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/tools/codemode"
)

// askCode suspends a run on a client tool nobody answers.
const askCode = `return await tools.callValue("client:app:ask", {q: 1});`

func (b *bundle) registerAsk(t *testing.T) {
	t.Helper()
	require.NoError(t, b.prod.RegisterClientTool(testutil.Context(t, 5*time.Second), contracts.CatalogTool{ID: "client:app:ask", Name: "ask", Description: "Ask the user."}))
}

// apiCounter counts the JetStream API requests on subjects with a prefix
// from when it is made.
func apiCounter(t *testing.T, nc *nats.Conn, prefix string) *atomic.Int32 {
	t.Helper()
	var n atomic.Int32
	sub, err := nc.Subscribe("$JS.API.>", func(m *nats.Msg) {
		if strings.HasPrefix(m.Subject, prefix) {
			n.Add(1)
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	return &n
}

// TestExpiryWithoutItsWorker: a run whose worker stopped (taking its timer
// with it) is expired by another worker's sweep once its TTL has passed,
// not before, and its record goes.
func TestExpiryWithoutItsWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.startWorker(t, "A", &codemode.Config{SweepInterval: time.Hour}, nil)
	b.registerAsk(t)
	job := b.exec(t, askCode, map[string]any{"limits": map[string]any{"snapshotTtlSeconds": 2}}, nil)
	require.Equal(t, contracts.StatusWaiting, b.await(t, job, true).Data.Status)
	suspended := time.Now()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, a.Stop(sctx))

	b.startWorker(t, "B", &codemode.Config{SweepInterval: 200 * time.Millisecond}, nil)
	ev := b.await(t, job, false)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeTimeout, ev.Data.Error.Code)
	require.Contains(t, ev.Data.Error.Message, "expired")
	require.GreaterOrEqual(t, time.Since(suspended), 2*time.Second-100*time.Millisecond, "expired before its TTL")
	requireNoRun(t, b.srv.Connect(t), job.Session, job.ID)
}

// TestSweepReadsOnlyDueRuns: sweeping reads the due time every record
// entry carries, not the records: runs that are not due are never loaded,
// however often the sweep runs.
func TestSweepReadsOnlyDueRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", &codemode.Config{SweepInterval: 100 * time.Millisecond}, nil)
	b.registerAsk(t)
	for range 10 {
		job := b.exec(t, askCode, map[string]any{"autoResume": true}, nil)
		require.Equal(t, contracts.StatusWaiting, b.await(t, job, true).Data.Status)
	}
	nc := b.srv.Connect(t)
	reads := apiCounter(t, nc, "$JS.API.DIRECT.GET.KV_toolq_runs.$KV.toolq_runs.s1.") // the runs' records
	sweeps := apiCounter(t, nc, "$JS.API.CONSUMER.CREATE.KV_toolq_runs")
	time.Sleep(1500 * time.Millisecond)
	require.NoError(t, nc.Flush())
	require.GreaterOrEqual(t, sweeps.Load(), int32(3), "the sweep did not run")
	require.Zero(t, reads.Load(), "the sweep loaded runs that were not due")
}

// TestOneSweepAtATime: workers claim each sweep on the bucket, so a fleet
// sweeps at most once in half an interval, not once an interval each.
func TestOneSweepAtATime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const interval = 300 * time.Millisecond
	for _, name := range []string{"A", "B", "C", "D"} {
		b.startWorker(t, name, &codemode.Config{SweepInterval: interval}, nil)
	}
	b.registerAsk(t)
	job := b.exec(t, askCode, nil, nil) // something to sweep
	require.Equal(t, contracts.StatusWaiting, b.await(t, job, true).Data.Status)
	nc := b.srv.Connect(t)
	// A sweep is one consumer.
	sweeps := apiCounter(t, nc, "$JS.API.CONSUMER.CREATE.KV_toolq_runs")
	const window = 3 * time.Second
	time.Sleep(window)
	require.NoError(t, nc.Flush())
	// Claims are half an interval apart; a sweep's consumer comes a moment
	// after its claim (longer on a loaded machine), so a few more may fall
	// in the window. Four workers each sweeping every interval make 36.
	limit := int32(window/(interval/2)) + 5
	require.LessOrEqual(t, sweeps.Load(), limit)
	require.GreaterOrEqual(t, sweeps.Load(), int32(4), "the fleet did not sweep")
}

// TestRemovedRecordIsExpired: a record the server removed at its own TTL
// (as an older worker's records are, or one no sweep reached for
// expiryGrace) leaves a MaxAge marker, and the sweep expires its run.
func TestRemovedRecordIsExpired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", &codemode.Config{SweepInterval: 200 * time.Millisecond}, nil)
	b.registerAsk(t)
	job := b.exec(t, askCode, nil, nil)
	require.Equal(t, contracts.StatusWaiting, b.await(t, job, true).Data.Status)

	// Rewrite the record as an older worker would: no due time, and a
	// TTL of its own (here a second, while the run's is 15 minutes).
	ctx := testutil.Context(t, 10*time.Second)
	run := b.readRun(ctx, t, job)
	require.Greater(t, time.Until(mustTime(t, run.rec["expiresAt"])), 10*time.Minute)
	_, err := run.js.PublishMsg(ctx, &nats.Msg{Subject: "$KV.toolq_runs." + run.entry.Key(), Data: run.entry.Value()},
		jetstream.WithExpectLastSequencePerSubject(run.entry.Revision()), jetstream.WithMsgTTL(time.Second))
	require.NoError(t, err)

	ev := b.await(t, job, false)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeTimeout, ev.Data.Error.Code)
}

// TestOldExpiryConsumerRemoved: the durable consumer earlier versions
// followed every write of the runs bucket with is deleted when code mode
// starts, and none takes its place.
func TestOldExpiryConsumerRemoved(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.startWorker(t, "A", nil, nil)
	js := testutil.JetStream(t, b.srv.Connect(t))
	ctx := testutil.Context(t, 10*time.Second)
	_, err := js.CreateOrUpdateConsumer(ctx, "KV_toolq_runs", jetstream.ConsumerConfig{
		Durable: "codemode_expiry", FilterSubject: "$KV.toolq_runs.>", AckPolicy: jetstream.AckExplicitPolicy, HeadersOnly: true,
	})
	require.NoError(t, err)
	require.NoError(t, a.Stop(ctx))
	b.startWorker(t, "B", nil, nil)
	_, err = js.Consumer(ctx, "KV_toolq_runs", "codemode_expiry")
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound)
	job := b.exec(t, `return await tools.callValue("toolq:core:noop", {x: 1});`, map[string]any{"autoResume": true}, nil)
	require.Equal(t, contracts.StatusCompleted, b.await(t, job, false).Data.Status)
	st, err := js.Stream(ctx, "KV_toolq_runs")
	require.NoError(t, err)
	infos := st.ListConsumers(ctx)
	for info := range infos.Info() {
		require.Empty(t, info.Config.Durable, "a durable consumer follows the runs bucket")
	}
	require.NoError(t, infos.Err())
}

func mustTime(t *testing.T, v any) time.Time {
	t.Helper()
	s, ok := v.(string)
	require.True(t, ok, "%v", v)
	at, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err)
	return at
}
