package producer

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
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
	b := setupEvents(t)
	nc, js, ctx := b.nc, b.js, b.ctx
	emit := func(jobID string) { b.emit(t, "f", jobID) }
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
		done <- fd.run(rctx, func(data []byte) error {
			ev, err := contracts.DecodeEvent(data)
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

// TestFeedPollReadsWhatFollowsTheCursor: while no consumer can be made, a
// feed reads the session's events after its cursor by direct gets: the
// session's own, in order, each once, and none of another session's.
func TestFeedPollReadsWhatFollowsTheCursor(t *testing.T) {
	t.Parallel()
	b := setupEvents(t)
	nc, ctx := b.nc, b.ctx
	seqs := map[string]uint64{}
	emit := func(session, jobID string) { seqs[jobID] = b.emit(t, session, jobID) }
	p, err := New(nc, &Config{Session: "p", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	fd, err := p.openFeed(ctx, contracts.Subjects{}.SessionEvents("p"), jetstream.DeliverAllPolicy)
	require.NoError(t, err)
	t.Cleanup(func() { fd.close(ctx) })
	for i := range 4 {
		emit("p", fmt.Sprintf("p%d", i))
		emit("q", fmt.Sprintf("q%d", i))
	}
	fd.cursor = seqs["p1"]
	var got []string
	collect := func(data []byte) error {
		ev, err := contracts.DecodeEvent(data)
		require.NoError(t, err)
		got = append(got, ev.Data.JobID)
		return nil
	}
	require.NoError(t, fd.poll(ctx, collect))
	require.Equal(t, []string{"p2", "p3"}, got)
	require.Equal(t, seqs["p3"], fd.cursor)
	require.NoError(t, fd.poll(ctx, collect))
	require.Equal(t, []string{"p2", "p3"}, got, "nothing twice")
	emit("p", "p4")
	require.NoError(t, fd.poll(ctx, collect))
	require.Equal(t, []string{"p2", "p3", "p4"}, got)
	require.Equal(t, int64(3), fd.polled.Load())
}
