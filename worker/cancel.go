package worker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// startCancelWatch loads the cancelled-job bucket and follows it, so that a
// queued job cancelled at any time never starts. It returns once the initial
// keys are loaded.
func (w *Worker) startCancelWatch(ctx context.Context) error {
	kv, err := w.js.KeyValue(ctx, w.cfg.Subjects.Bucket("cancels"))
	if err != nil {
		return fmt.Errorf("worker: cancels bucket: %w", err)
	}
	watcher, err := kv.WatchAll(w.runCtx, jetstream.IgnoreDeletes()) //nolint:contextcheck // the watch lives until Stop, not until Start's ctx ends
	if err != nil {
		return fmt.Errorf("worker: watch cancels: %w", err)
	}
	w.watcher = watcher
	ready := make(chan struct{})
	w.loops.Add(1)
	go func() {
		defer w.loops.Done()
		initial := true
		for entry := range watcher.Updates() {
			if entry == nil {
				if initial {
					initial = false
					close(ready)
				}
				continue
			}
			w.markCancelled(entry.Key())
		}
		if initial {
			close(ready)
		}
	}()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("worker: loading cancels: %w", ctx.Err())
	}
}

// onCancelMsg handles a core-NATS cancel of a running job.
func (w *Worker) onCancelMsg(m *nats.Msg) {
	id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	if contracts.ValidID(id) {
		w.markCancelled(id)
	}
}

const cancelMemory = 10000

func (w *Worker) markCancelled(jobID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if len(w.cancels) >= cancelMemory {
		horizon := now.Add(-w.eventsMaxAge())
		for id, at := range w.cancels {
			if at.Before(horizon) {
				delete(w.cancels, id)
			}
		}
	}
	w.cancels[jobID] = now
	if f, ok := w.inflight[jobID]; ok {
		f.cancel(errJobCancelled)
	}
}

func (w *Worker) eventsMaxAge() time.Duration {
	if w.cfg.EventsMaxAge > 0 {
		return w.cfg.EventsMaxAge
	}
	return 24 * time.Hour
}

func (w *Worker) isCancelled(jobID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cancelledLocked(jobID)
}

func (w *Worker) cancelledLocked(jobID string) bool {
	_, ok := w.cancels[jobID]
	return ok
}
