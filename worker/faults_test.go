package worker_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/worker"
)

// recordHandler sends every log record to a channel, so a test waits on
// the worker's own signal.
type recordHandler struct{ ch chan slog.Record }

func newRecorder() *recordHandler { return &recordHandler{ch: make(chan slog.Record, 1024)} }

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.ch <- r.Clone():
	default:
	}
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// next waits for a record whose message is msg.
func (h *recordHandler) next(t *testing.T, msg string) slog.Record {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case r := <-h.ch:
			if r.Message == msg {
				return r
			}
		case <-timeout:
			t.Fatalf("no log record %q", msg)
		}
	}
}

func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

func TestConnectionLossAndReturnAreLogged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder()
	b.startWorker(t, &worker.Config{Builtins: true, Logger: slog.New(rec)}, nil)
	rec.next(t, "worker started")
	b.srv = b.srv.Restart(t)
	rec.next(t, "NATS connection lost; reconnecting")
	r := rec.next(t, "NATS connection restored")
	require.Equal(t, slog.KindDuration, attr(r, "outage").Kind())
	require.Positive(t, attr(r, "outage").Duration())
	// The worker still serves.
	job := b.submit(t, worker.ToolNoop, `{}`, nil)
	require.Equal(t, "completed", string(b.await(t, job).Data.Status))
}
