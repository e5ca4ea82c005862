package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
	kv, err := w.js.KeyValue(ctx, w.cfg.Subjects.CancelsBucket())
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

// maxDeliveriesAdvisory is the part of JetStream's MAX_DELIVERIES advisory we use.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// onMaxDeliveries is the safety net for a job whose worker died during its
// last attempt: JetStream will not deliver it again, and in a work-queue
// stream it would stay forever. Every worker hears the advisory; the DLQ
// write and the event are deduplicated, and only one delete succeeds.
func (w *Worker) onMaxDeliveries(m *nats.Msg) {
	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(m.Data, &adv); err != nil || adv.StreamSeq == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping {
		return
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.reapExhausted(adv)
	}()
}

func (w *Worker) reapExhausted(adv maxDeliveriesAdvisory) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := w.jobs.GetMsg(ctx, adv.StreamSeq)
	if err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			w.log.Warn("max deliveries: job unreadable", slog.Uint64("seq", adv.StreamSeq), slog.Any("err", err))
		}
		return
	}
	toolName := w.cfg.Subjects.ToolOf(raw.Subject)
	if toolName == "" {
		return // not a job of ours (e.g. a schedule)
	}
	werr := contracts.Errorf(contracts.CodeInternalError,
		"attempts exhausted: the worker running attempt %d stopped without an answer", adv.Deliveries)
	job, derr := contracts.DecodeJob(raw.Data)
	if derr != nil {
		job = nil
	}
	if err := w.publishDLQ(ctx, toolName, raw.Data, job, int(adv.Deliveries), werr); err != nil { //nolint:gosec // G115: at most the consumer's MaxDeliver, an int
		w.log.Warn("max deliveries: DLQ write failed", slog.Any("err", err))
		return
	}
	if job != nil {
		ev, seq, err := w.events.Last(ctx, job.Session, job.ID)
		if err == nil && (ev == nil || !ev.Data.Status.Terminal()) {
			fe := contracts.NewEvent(w.source, job, contracts.StatusFailed, 1, time.Now())
			fe.Data.Attempt = int(adv.Deliveries) //nolint:gosec // G115: at most the consumer's MaxDeliver, an int
			fe.Data.Error = werr
			if _, err := w.events.Publish(ctx, fe, seq, ""); err != nil {
				w.log.Debug("max deliveries: failed event", slog.Any("err", err))
			} else {
				ev = fe
			}
		}
		if ev != nil && ev.Data.Status.Terminal() {
			if err := w.notifyParent(ctx, job, ev); err != nil {
				w.log.Warn("max deliveries: parent run not told", slog.Any("err", err))
				return
			}
		}
	}
	if err := w.jobs.DeleteMsg(ctx, adv.StreamSeq); err != nil {
		w.log.Debug("max deliveries: delete", slog.Any("err", err))
	}
	w.log.Warn("job exhausted its attempts after a lost worker; moved to the DLQ",
		slog.String("tool", toolName), slog.Uint64("seq", adv.StreamSeq))
}
