package codemode

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/worker"
)

// A Stop whose context ends first returns early, but the stop goes on: a
// second Stop waits for it, and by then code mode's producer is closed.
func TestSecondStopClosesTheProducer(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	nc := srv.Connect(t)
	quiet := slog.New(slog.DiscardHandler)
	w, err := worker.New(nc, &worker.Config{Logger: quiet})
	require.NoError(t, err)
	eng, err := sandbox.NewEngine(context.Background(), &sandbox.EngineConfig{SnapshotKey: []byte("test-key-0123456789abcdef0123456789abcdef")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	cm, err := Register(w, nc, &Config{Engine: eng, Logger: quiet})
	require.NoError(t, err)
	ctx := testutil.Context(t, 20*time.Second)
	require.NoError(t, w.Start(ctx)) // starts code mode, its extension
	select {
	case <-cm.Stopped():
		t.Fatal("the worker's Start did not start code mode")
	default:
	}

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	_ = cm.Stop(ended) // returns when its context ends; the stop goes on
	require.NoError(t, cm.Stop(ctx))
	select {
	case <-cm.Stopped():
	default:
		t.Fatal("Stopped is not closed after Stop returned")
	}
	_, err = cm.prod.Await(testutil.Context(t, 2*time.Second), "s1", "no-such-job", nil)
	require.ErrorIs(t, err, producer.ErrClosed)
	require.NoError(t, w.Stop(ctx), "the worker's Stop finds code mode stopped")
}
