package producer

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
)

// eventsBundle is what the internal tests of following need: a server
// with toolq's streams, a connection, and the events writer a worker uses.
type eventsBundle struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	ctx    context.Context
	events *bus.Events
}

func setupEvents(t *testing.T) *eventsBundle {
	t.Helper()
	srv := testutil.StartJetStream(t)
	nc := srv.Connect(t)
	js := testutil.JetStream(t, nc)
	ctx := testutil.Context(t, 30*time.Second)
	require.NoError(t, bus.Ensure(ctx, js, bus.Config{}))
	events, err := bus.NewEvents(ctx, js, contracts.Subjects{})
	require.NoError(t, err)
	return &eventsBundle{nc: nc, js: js, ctx: ctx, events: events}
}

// emit stores a completed event of jobID in session, with no expected
// last sequence, and returns its stream sequence.
func (b *eventsBundle) emit(t *testing.T, session, jobID string) uint64 {
	t.Helper()
	ev := contracts.NewEvent("/test", &contracts.Job{ID: jobID, Session: session, Tool: contracts.ToolNoop}, contracts.StatusCompleted, 1, time.Now())
	seq, err := b.events.Publish(b.ctx, ev, 0, "")
	require.NoError(t, err)
	return seq
}
