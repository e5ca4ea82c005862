package producer_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
)

var quiet = slog.New(slog.DiscardHandler)

type bundle struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	prod   *producer.Producer
	events *bus.Events
}

// setup starts a server with toolq's streams but no worker: the tests write
// events themselves, as a worker would, and the producer submits without
// asking whether a worker serves the tool (TestSubmitUnservedTool does).
func setup(t *testing.T) *bundle {
	t.Helper()
	srv := testutil.StartJetStream(t)
	nc := srv.Connect(t)
	js := testutil.JetStream(t, nc)
	cfg, err := bus.Config{}.WithDefaults()
	require.NoError(t, err)
	ctx := testutil.Context(t, 10*time.Second)
	require.NoError(t, bus.Ensure(ctx, js, cfg))
	ev, err := bus.NewEvents(ctx, js, contracts.Subjects{})
	require.NoError(t, err)
	p, err := producer.New(nc, &producer.Config{Session: "p", Logger: quiet, SubmitUnserved: true})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return &bundle{nc: nc, js: js, prod: p, events: ev}
}

func (b *bundle) emit(t *testing.T, job *contracts.Job, status contracts.Status, expect uint64) uint64 {
	t.Helper()
	ev := contracts.NewEvent("/test", job, status, 1, time.Now())
	seq, err := b.events.Publish(testutil.Context(t, 5*time.Second), ev, expect, "")
	require.NoError(t, err)
	return seq
}

func TestManyWaitersOneJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := &contracts.Job{ID: "j1", Session: "p", Tool: "noop"}
	ctx := testutil.Context(t, 10*time.Second)
	var g errgroup.Group
	started := make(chan struct{}, 20)
	for range 20 {
		g.Go(func() error {
			started <- struct{}{}
			ev, err := b.prod.Await(ctx, "p", "j1", nil)
			if err != nil {
				return err
			}
			if ev.Data.Status != contracts.StatusCompleted {
				return context.Canceled
			}
			return nil
		})
	}
	for range 20 {
		<-started
	}
	seq := b.emit(t, job, contracts.StatusRunning, 0)
	b.emit(t, job, contracts.StatusCompleted, seq)
	require.NoError(t, g.Wait())
}

func TestAwaitParked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := &contracts.Job{ID: "j2", Session: "p", Tool: "code_mode.exec"}
	b.emit(t, job, contracts.StatusWaiting, 0)
	ctx := testutil.Context(t, 5*time.Second)
	ev, err := b.prod.Await(ctx, "p", "j2", &producer.AwaitOpts{Parked: true})
	require.NoError(t, err)
	require.Equal(t, contracts.StatusWaiting, ev.Data.Status)
	// Without Parked the waiting event is not an answer.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = b.prod.Await(short, "p", "j2", nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestEventWritesAreConditional(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := &contracts.Job{ID: "j3", Session: "p", Tool: "noop"}
	seq := b.emit(t, job, contracts.StatusCompleted, 0)
	// A second writer that still expects an empty subject loses.
	ev := contracts.NewEvent("/other", job, contracts.StatusFailed, 1, time.Now())
	_, err := b.events.Publish(testutil.Context(t, 5*time.Second), ev, 0, "")
	require.ErrorIs(t, err, bus.ErrConflict)
	// The same event written again (a retry after a lost ack) is refused
	// too: the server checks the expectation before deduplicating.
	again := contracts.NewEvent("/test", job, contracts.StatusCompleted, 1, time.Now())
	_, err = b.events.Publish(testutil.Context(t, 5*time.Second), again, 0, "")
	require.ErrorIs(t, err, bus.ErrConflict)
	last, lastSeq, err := b.events.Last(testutil.Context(t, 5*time.Second), "p", "j3")
	require.NoError(t, err)
	require.Equal(t, seq, lastSeq)
	require.Equal(t, contracts.StatusCompleted, last.Data.Status)
	// Cancelling a completed job says so.
	require.ErrorIs(t, b.prod.Cancel(testutil.Context(t, 5*time.Second), "p", "j3"), producer.ErrFinished)
}

func TestReadEventsEmptyAndFollow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	n := 0
	require.NoError(t, b.prod.ReadEvents(testutil.Context(t, 5*time.Second), "nobody", nil, func(*contracts.Event) error { n++; return nil }))
	require.Equal(t, 0, n)

	ctx := testutil.Context(t, 10*time.Second)
	got := make(chan *contracts.Event, 1)
	done := make(chan error, 1)
	go func() {
		done <- b.prod.ReadEvents(ctx, "p", &producer.ReadOpts{Follow: true}, func(ev *contracts.Event) error {
			got <- ev
			return producer.ErrStop
		})
	}()
	job := &contracts.Job{ID: "late", Session: "p", Tool: "noop"}
	b.emit(t, job, contracts.StatusCompleted, 0)
	select {
	case ev := <-got:
		require.Equal(t, "late", ev.Data.JobID)
	case <-ctx.Done():
		t.Fatal("follow did not deliver")
	}
	require.NoError(t, <-done)
}

func TestSubmitValidates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testutil.Context(t, 5*time.Second)
	for name, opts := range map[string]*producer.SubmitOpts{
		"long id":      {ID: string(make([]byte, 129))},
		"bad parent":   {Parent: &contracts.Parent{RunID: "r", CallID: "c d"}},
		"neg attempts": {MaxAttempts: -1},
		"huge timeout": {TimeoutMs: (25 * time.Hour).Milliseconds()},
	} {
		_, err := b.prod.Submit(ctx, "noop", nil, opts)
		require.ErrorIs(t, err, contracts.ErrInvalidInput, name)
	}
	_, err := b.prod.Submit(ctx, "noop", json.RawMessage(`{"a":`), nil)
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
	_, err = b.prod.Await(ctx, "p", "bad/id", nil)
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
	_, err = producer.New(b.nc, &producer.Config{Session: "no spaces allowed"})
	require.Error(t, err)
}

func TestAwaitDefaultTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Without a deadline, AwaitTimeout bounds the wait for a job that
	// never ends.
	p, err := producer.New(b.nc, &producer.Config{Session: "p", AwaitTimeout: 300 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	done := make(chan error, 1)
	go func() {
		_, err := p.Await(context.Background(), "p", "never", nil)
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-testutil.Context(t, 10*time.Second).Done():
		t.Fatal("Await without a deadline did not end")
	}

	// A context with a deadline is used as it is: an AwaitTimeout that
	// would expire at once does not apply.
	brief, err := producer.New(b.nc, &producer.Config{Session: "p", AwaitTimeout: time.Nanosecond, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(brief.Close)
	b.emit(t, &contracts.Job{ID: "j-done", Session: "p", Tool: "noop"}, contracts.StatusCompleted, 0)
	ev, err := brief.Await(testutil.Context(t, 10*time.Second), "p", "j-done", nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	_, err = brief.Await(context.Background(), "p", "j-done", nil)
	require.ErrorIs(t, err, context.DeadlineExceeded, "without a deadline it does")

	_, err = producer.New(b.nc, &producer.Config{AwaitTimeout: -time.Second})
	require.Error(t, err)
}

// A submit to a server without toolq's streams fails with a hint and hands
// back no job, so a caller cannot go on to await a job that was never queued.
func TestSubmitWithoutStreams(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	p, err := producer.New(srv.Connect(t), &producer.Config{Session: "p", Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	job, err := p.Submit(testutil.Context(t, 5*time.Second), "noop", nil, nil)
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
	require.ErrorContains(t, err, "start a worker or `toolq dev` first")
	require.Nil(t, job)
}
