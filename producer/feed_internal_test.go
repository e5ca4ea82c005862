package producer

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
)

// TestFeedRemakesADeletedConsumerWhereItLeftOff: the server deletes a
// session follower's consumer (as when the server hosting it dies); the
// feed makes a new one that starts after the last event it passed on.
// Events stored before the feed opened, or passed on before the loss,
// would come again from a consumer made from the start (or from the first
// sequence), and one stored while no consumer existed would be lost by a
// new-only consumer: the test sees each event once, in order.
func TestFeedRemakesADeletedConsumerWhereItLeftOff(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	nc := srv.Connect(t)
	js := testutil.JetStream(t, nc)
	ctx := testutil.Context(t, 30*time.Second)
	require.NoError(t, bus.Ensure(ctx, js, bus.Config{}))
	events, err := bus.NewEvents(ctx, js, contracts.Subjects{})
	require.NoError(t, err)
	emit := func(jobID string) {
		t.Helper()
		ev := contracts.NewEvent("/test", &contracts.Job{ID: jobID, Session: "f", Tool: contracts.ToolNoop}, contracts.StatusCompleted, 1, time.Now())
		_, err := events.Publish(ctx, ev, 0, "")
		require.NoError(t, err)
	}
	p, err := New(nc, &Config{Session: "f", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(p.Close)

	emit("before-1")
	emit("before-2")
	fd, err := p.openFeed(ctx, contracts.Subjects{}.SessionEvents("f"), jetstream.DeliverNewPolicy)
	require.NoError(t, err)
	require.Equal(t, uint64(2), fd.cursor, "a new-only feed starts after the stored events")
	got := make(chan string, 16)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- fd.run(rctx, func(m jetstream.Msg) error {
			ev, err := contracts.DecodeEvent(m.Data())
			if err == nil {
				got <- ev.Data.JobID
			}
			return nil
		})
	}()
	next := func() string {
		t.Helper()
		select {
		case id := <-got:
			return id
		case <-ctx.Done():
			t.Fatal("no event from the feed")
			return ""
		}
	}
	emit("a")
	emit("b")
	require.Equal(t, "a", next())
	require.Equal(t, "b", next())

	first := fd.cons.CachedInfo().Name
	require.NoError(t, js.DeleteConsumer(ctx, contracts.Subjects{}.EventsStream(), first))
	emit("c")
	emit("d")
	require.Equal(t, "c", next())
	require.Equal(t, "d", next())
	require.Equal(t, int64(1), fd.remade.Load())
	emit("e")
	require.Equal(t, "e", next())
	select {
	case id := <-got:
		t.Fatalf("event %s passed on twice or out of turn", id)
	default:
	}
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
	second := fd.cons.CachedInfo().Name
	require.NotEqual(t, first, second)
	fd.close(ctx)
	_, err = js.Consumer(ctx, contracts.Subjects{}.EventsStream(), second)
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound, "close deletes the consumer")
}
