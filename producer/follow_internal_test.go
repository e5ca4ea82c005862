package producer

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// TestAwaitKeepsTheIdleFollowerItFound is the regression test of a hang:
// Await found a session's idle follower without marking it used, and an
// Await on another session, starting its own follower, swept the first one
// away before the waiter was registered with it. The waiter then sat on a
// stopped consumer until its context ended.
func TestAwaitKeepsTheIdleFollowerItFound(t *testing.T) {
	t.Parallel()
	b := setupEvents(t)
	nc, ctx, events := b.nc, b.ctx, b.events
	emit := func(session, jobID string, status contracts.Status, expect uint64) uint64 {
		t.Helper()
		ev := contracts.NewEvent("/test", &contracts.Job{ID: jobID, Session: session, Tool: contracts.ToolNoop}, status, 1, time.Now())
		seq, err := events.Publish(ctx, ev, expect, "")
		require.NoError(t, err)
		return seq
	}
	p, err := New(nc, &Config{Session: "a", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(p.Close)

	// Session a gets a follower, which then has no waiter; make it look
	// idle for longer than followerIdle.
	emit("a", "done", contracts.StatusCompleted, 0)
	_, err = p.Await(ctx, "a", "done", nil)
	require.NoError(t, err)
	p.mu.Lock()
	fa := p.followers["a"]
	require.NotNil(t, fa)
	fa.mu.Lock()
	fa.lastUsed = time.Now().Add(-2 * followerIdle)
	fa.mu.Unlock()
	p.mu.Unlock()

	// While an Await on a has just found that follower, an Await on b
	// starts b's follower, which sweeps idle ones.
	emit("b", "other", contracts.StatusCompleted, 0)
	waiting := make(chan struct{})
	p.hooks = &awaitHooks{
		followed: func(session, _ string) {
			if session == "a" {
				if _, err := p.Await(ctx, "b", "other", nil); err != nil {
					t.Error(err) // not on the test's goroutine: no FailNow
				}
			}
		},
		waiting: func(session, _ string) {
			if session == "a" {
				close(waiting)
			}
		},
	}
	seq := emit("a", "j2", contracts.StatusRunning, 0)
	type answer struct {
		ev  *contracts.Event
		err error
	}
	got := make(chan answer, 1)
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	go func() {
		ev, err := p.Await(actx, "a", "j2", nil)
		got <- answer{ev, err}
	}()
	select {
	case <-waiting:
	case <-ctx.Done():
		t.Fatal("Await on a never got to wait")
	}
	// The terminal event comes after Await read the stored ones: only the
	// follower can deliver it.
	emit("a", "j2", contracts.StatusCompleted, seq)
	a := <-got
	require.NoError(t, a.err, "the waiter was left on a stopped follower")
	require.Equal(t, contracts.StatusCompleted, a.ev.Data.Status)
}

// TestAwaitReadsAgainWhatTheFollowerMissed: a terminal event the follower
// did not hand to the waiter (in a cluster: dispatched just before the
// waiter was registered, while the direct get that should have found it
// was answered by a replica without it) is found by Await's re-read. The
// test takes the waiter off the follower once Await waits, then stores the
// event: only the re-read can return it.
func TestAwaitReadsAgainWhatTheFollowerMissed(t *testing.T) {
	t.Parallel()
	b := setupEvents(t)
	nc, ctx, events := b.nc, b.ctx, b.events
	p, err := New(nc, &Config{Session: "s", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(p.Close)

	waiting := make(chan struct{})
	p.hooks = &awaitHooks{waiting: func(session, jobID string) {
		p.mu.Lock()
		f := p.followers[session]
		p.mu.Unlock()
		f.mu.Lock()
		delete(f.waiters, jobID) // the push that never comes
		f.mu.Unlock()
		close(waiting)
	}}
	got := make(chan *contracts.Event, 1)
	go func() {
		ev, err := p.Await(ctx, "s", "missed", nil)
		if err != nil {
			t.Error(err) // not on the test's goroutine: no FailNow
		}
		got <- ev
	}()
	<-waiting
	ev := contracts.NewEvent("/test", &contracts.Job{ID: "missed", Session: "s", Tool: contracts.ToolNoop}, contracts.StatusCompleted, 1, time.Now())
	_, err = events.Publish(ctx, ev, 0, "")
	require.NoError(t, err)
	select {
	case ev := <-got:
		require.NotNil(t, ev)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	case <-time.After(10 * time.Second):
		t.Fatal("Await did not read the stored event again")
	}
}

// TestCloseDeletesTheFollowersConsumers checks that a closed producer
// leaves no consumer of its followers on the events stream, rather than
// leaving them to the server's inactivity threshold.
func TestCloseDeletesTheFollowersConsumers(t *testing.T) {
	t.Parallel()
	b := setupEvents(t)
	nc, ctx := b.nc, b.ctx
	stream, err := b.js.Stream(ctx, contracts.Subjects{}.EventsStream())
	require.NoError(t, err)
	consumers := func() int {
		t.Helper()
		info, err := stream.Info(ctx)
		require.NoError(t, err)
		return info.State.Consumers
	}
	before := consumers()
	p, err := New(nc, &Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	for _, session := range []string{"a", "b", "c"} {
		b.emit(t, session, "j-"+session)
		_, err := p.Await(ctx, session, "j-"+session, nil)
		require.NoError(t, err)
	}
	require.Equal(t, before+3, consumers(), "a follower per session")
	p.Close()
	require.Equal(t, before, consumers(), "the followers' consumers once the producer closed")
}
