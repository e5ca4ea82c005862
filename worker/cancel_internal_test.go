package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
)

func TestCancelMemoryIsBounded(t *testing.T) {
	t.Parallel()
	w := &Worker{inflight: map[string]*inflight{}}
	w.cancels = newCancelMemory(time.Hour, 1000)
	for i := range 5000 {
		w.markCancelled("job-" + strconv.Itoa(i))
	}
	require.Equal(t, 1000, w.cancels.len())
	now := time.Now()
	// Recent cancels are remembered; dropped ones ask for a look-up.
	ok, _ := w.cancels.has("job-4999", now)
	require.True(t, ok)
	ok, lookup := w.cancels.has("job-0", now)
	require.False(t, ok)
	require.True(t, lookup)
	// Expired ones go first and need no look-up once all dropped ones
	// would have expired.
	ok, lookup = w.cancels.has("job-0", now.Add(2*time.Hour))
	require.False(t, ok)
	require.False(t, lookup)
	w.cancels.add("late", now.Add(2*time.Hour))
	require.Equal(t, 1, w.cancels.len())
}

// BenchmarkMarkCancelled is the cost of one cancel with a million cancels
// remembered (before the bound: 44 ms per cancel, a scan of the whole map
// under the worker's lock; see RATIONALE).
func BenchmarkMarkCancelled(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			w := &Worker{inflight: map[string]*inflight{}}
			w.cancels = newCancelMemory(24*time.Hour, n)
			now := time.Now()
			for i := range n {
				w.cancels.add("old-"+strconv.Itoa(i), now)
			}
			b.ResetTimer()
			for i := range b.N {
				w.markCancelled("new-" + strconv.Itoa(i))
			}
		})
	}
}

// A cancel that memory dropped for room is found in the bucket: the job
// still never starts.
func TestForgottenCancelIsLookedUp(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	w, err := New(srv.Connect(t), &Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	w.cancels = newCancelMemory(time.Hour, 10)
	var runs atomic.Int32
	require.NoError(t, w.Register("count.me", HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
		runs.Add(1)
		return json.RawMessage(`1`), nil
	}), nil))
	heard := make(chan string, 64)
	require.NoError(t, w.OnCancel(func(_ context.Context, _, _, id string) { heard <- id }))
	require.NoError(t, w.Start(testutil.Context(t, 10*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})
	prod, err := producer.New(srv.Connect(t), &producer.Config{Session: "s1", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(prod.Close)

	for i := range 20 {
		// Cancels ahead of their jobs: the marks are written.
		require.ErrorIs(t, prod.Cancel(testutil.Context(t, 5*time.Second), "s1", "job-"+strconv.Itoa(i)), producer.ErrUnknownJob)
	}
	for range 20 {
		<-heard
	}
	require.Equal(t, 10, w.cancels.len(), "memory keeps 10")
	job, err := prod.Submit(testutil.Context(t, 5*time.Second), "count.me", nil, &producer.SubmitOpts{ID: "job-0"})
	require.NoError(t, err)
	ev, err := prod.Await(testutil.Context(t, 10*time.Second), job.Session, job.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCancelled, ev.Data.Status)
	// The job is acked without running; its message leaves the queue.
	st, err := w.js.Stream(testutil.Context(t, 5*time.Second), "TOOLQ_JOBS")
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for st.CachedInfo().State.Msgs != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		_, _ = st.Info(testutil.Context(t, 5*time.Second))
	}
	require.Zero(t, st.CachedInfo().State.Msgs)
	require.Zero(t, runs.Load(), "a cancelled job never starts")
}
