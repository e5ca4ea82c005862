package worker

import (
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// watchConnection logs when the worker's NATS connection is lost and when
// it comes back, with how long it was gone. It listens to the connection's
// status changes, so the application's own handlers stay as they are.
func (w *Worker) watchConnection(ch chan nats.Status) {
	defer w.loops.Done()
	defer w.nc.RemoveStatusListener(ch)
	var lost time.Time
	for {
		select {
		case <-w.runCtx.Done():
			return
		case s := <-ch:
			switch s {
			case nats.RECONNECTING, nats.DISCONNECTED:
				if lost.IsZero() {
					lost = time.Now()
					w.log.Warn("NATS connection lost; reconnecting", slog.Any("err", w.nc.LastError()))
				}
			case nats.CONNECTED:
				if !lost.IsZero() {
					w.log.Info("NATS connection restored", slog.String("server", w.nc.ConnectedUrlRedacted()),
						slog.Duration("outage", time.Since(lost)))
					lost = time.Time{}
				}
			case nats.CLOSED:
				w.log.Warn("NATS connection closed")
				return
			}
		}
	}
}
