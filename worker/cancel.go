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
// keys are loaded. Every cancel recorded after that also goes to the cancel
// hooks: the worker's watch is the one cancel feed of the process.
func (w *Worker) startCancelWatch(ctx context.Context) error {
	kv, err := w.js.KeyValue(ctx, w.cfg.Subjects.CancelsBucket())
	if err != nil {
		return fmt.Errorf("worker: cancels bucket: %w", err)
	}
	watcher, err := kv.WatchAll(w.runCtx, jetstream.IgnoreDeletes()) //nolint:contextcheck // the watch lives until Stop, not until Start's ctx ends
	if err != nil {
		return fmt.Errorf("worker: watch cancels: %w", err)
	}
	w.watcher = watcher
	if len(w.onCancel) > 0 {
		w.feed = make(chan cancelNote, cancelFeedBuffer)
		w.loops.Add(1)
		go w.runCancelHooks(w.feed)
	}
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
			if !initial {
				// The bucket's value is the job's session.
				w.announce(cancelNote{session: string(entry.Value()), jobID: entry.Key()})
			}
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

// cancelNote is one cancel on its way to the hooks.
type cancelNote struct{ session, jobID string }

// cancelFeedBuffer is how many cancels may wait for slow hooks before the
// watch waits for them.
const cancelFeedBuffer = 256

// announce hands a cancel to the hook loop, unless there are no hooks.
func (w *Worker) announce(n cancelNote) {
	if w.feed == nil || !contracts.ValidID(n.session) || !contracts.ValidID(n.jobID) {
		return
	}
	select {
	case w.feed <- n:
	case <-w.runCtx.Done():
	}
}

// runCancelHooks passes each cancel to every hook, in order, until the
// worker stops.
func (w *Worker) runCancelHooks(feed <-chan cancelNote) {
	defer w.loops.Done()
	ctx := w.runCtx
	for {
		select {
		case <-ctx.Done():
			return
		case n := <-feed:
			for _, h := range w.onCancel {
				h(ctx, n.session, n.jobID)
			}
		}
	}
}

// onCancelMsg handles a core-NATS cancel of a running job, of the default
// tenant or (<prefix>.t.<tenant>.cancel.<id>) of the tenant of the subject.
func (w *Worker) onCancelMsg(m *nats.Msg) {
	id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	tenant, ok := w.cfg.Subjects.TenantOf(m.Subject)
	if ok && contracts.ValidID(id) {
		w.markCancelled(contracts.TenantKey(tenant, id))
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
