package codemode

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/worker"
)

// TestDueTimers: a timer is armed only for a due time after now and
// within the horizon, a new due time replaces the old one, and a fired
// timer hands its key over once and is forgotten.
func TestDueTimers(t *testing.T) {
	t.Parallel()
	d := newDueTimers(time.Second)
	now := time.Now()
	d.set("past", now.Add(-time.Millisecond), now)
	d.set("far", now.Add(2*time.Second), now)
	d.set("soon", now.Add(time.Hour), now)
	d.set("soon", now.Add(20*time.Millisecond), now) // replaces the hour
	d.set("gone", now.Add(30*time.Millisecond), now)
	d.stop("gone")
	armed := func() int {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.by)
	}
	require.Equal(t, 1, armed())
	select {
	case key := <-d.fired:
		require.Equal(t, "soon", key)
	case <-time.After(5 * time.Second):
		t.Fatal("the timer did not fire")
	}
	require.Eventually(t, func() bool { return armed() == 0 }, time.Second, time.Millisecond)
	select {
	case key := <-d.fired:
		t.Fatalf("%s fired too", key)
	case <-time.After(100 * time.Millisecond):
	}
	d.set("a", now.Add(500*time.Millisecond), now)
	d.stopAll()
	require.Zero(t, armed())
}

// TestTimersOnlyForRunsDueSoon: a worker keeps no timer for a run that
// ended, nor for one due past the horizon (the sweep arms it later), and
// one for a run due within it.
func TestTimersOnlyForRunsDueSoon(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	nc := srv.Connect(t)
	quiet := slog.New(slog.DiscardHandler)
	w, err := worker.New(nc, &worker.Config{Logger: quiet, Builtins: true, StopTimeout: time.Second})
	require.NoError(t, err)
	eng, err := sandbox.NewEngine(context.Background(), &sandbox.EngineConfig{SnapshotKey: []byte("test-key-0123456789abcdef0123456789abcdef")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	// Sweeps an hour apart: the horizon is an hour and a half.
	cm, err := Register(w, nc, &Config{Engine: eng, Logger: quiet, SweepInterval: time.Hour, MaxSnapshotTTL: 48 * time.Hour})
	require.NoError(t, err)
	ctx := testutil.Context(t, 30*time.Second)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	prod, err := producer.New(srv.Connect(t), &producer.Config{Session: "s1", Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	// The first sweep (soon after start) is over before the runs: a sweep
	// that read a run's entry just before it ended may arm a timer after
	// the run dropped its own, which then fires for nothing.
	require.Eventually(t, func() bool {
		_, counted, err := cm.sweepCounts(ctx)
		return err == nil && counted
	}, 10*time.Second, 10*time.Millisecond)
	// The first sweep (soon after start) is over before the runs: a sweep
	// that read a run's entry just before it ended may arm a timer after
	// the run dropped its own, which then fires for nothing.
	require.Eventually(t, func() bool {
		_, counted, err := cm.sweepCounts(ctx)
		return err == nil && counted
	}, 10*time.Second, 10*time.Millisecond)
	armed := func() int {
		cm.store.due.mu.Lock()
		defer cm.store.due.mu.Unlock()
		return len(cm.store.due.by)
	}
	run := func(code string, ttl int, parked bool) *contracts.Event {
		in, err := json.Marshal(map[string]any{"code": code, "autoResume": true, "limits": map[string]any{"snapshotTtlSeconds": ttl}})
		require.NoError(t, err)
		job, err := prod.Submit(ctx, contracts.ToolCodeModeExec, in, nil)
		require.NoError(t, err)
		ev, err := prod.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Parked: parked})
		require.NoError(t, err)
		return ev
	}
	for range 20 {
		ev := run(`return (await tools.callValue("toolq:core:noop", {x: 1})).x;`, 60, false)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	}
	// A run's record and timer go just after its completed event.
	require.Eventually(t, func() bool { return armed() == 0 }, 5*time.Second, 5*time.Millisecond, "timers of runs that ended")
	require.NoError(t, prod.RegisterClientTool(ctx, contracts.CatalogTool{ID: "client:app:ask", Name: "ask", Description: "Ask."}))
	ask := `return await tools.callValue("client:app:ask", {});`
	require.Equal(t, contracts.StatusWaiting, run(ask, 24*3600, true).Data.Status)
	require.Zero(t, armed(), "a timer for a run due in a day")
	require.Equal(t, contracts.StatusWaiting, run(ask, 60, true).Data.Status)
	require.Equal(t, 1, armed(), "a run due in a minute has its timer")
}
