package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func (w *Worker) startTool(ctx context.Context, t *tool) error {
	stream, filter := w.cfg.Subjects.JobsStream(), w.cfg.Subjects.Job(t.name)
	if t.tenant != "" {
		stream, filter = w.cfg.Subjects.TenantJobsStream(t.tenant), w.cfg.Subjects.TenantJob(t.tenant, t.name)
	}
	cons, err := w.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       w.cfg.Subjects.ConsumerName(t.name),
		Description:   "toolq workers of " + t.name,
		FilterSubject: filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       t.cfg.AckWait,
		MaxDeliver:    t.cfg.Retry.MaxAttempts,
		MaxAckPending: t.cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("worker: consumer for %s: %w", t.name, err)
	}
	t.cons = cons
	if w.cfg.Observer != nil && t.obs == nil {
		t.obs = w.cfg.Observer.Tool(t.name, t.tenant)
	}
	if t.cfg.Ready != nil {
		w.loops.Add(1)
		go w.gate(t) //nolint:contextcheck // the consume loop is owned by Start/Stop and uses the worker's run context
		return nil
	}
	if err := w.resume(t); err != nil { //nolint:contextcheck // the consume loop is owned by Start/Stop and uses the worker's run context
		return fmt.Errorf("worker: consume %s: %w", t.name, err)
	}
	return nil
}

// reopen lets a tool closed by an earlier Stop pull again.
func (t *tool) reopen() {
	t.ccMu.Lock()
	defer t.ccMu.Unlock()
	t.closed, t.cc = false, nil
}

// resume starts pulling jobs of t (again).
func (w *Worker) resume(t *tool) error {
	t.ccMu.Lock()
	defer t.ccMu.Unlock()
	if t.closed || t.cc != nil {
		return nil
	}
	cc, err := t.cons.Consume(func(msg jetstream.Msg) {
		t.sem <- struct{}{}
		w.wg.Add(1)
		go func() {
			defer func() { <-t.sem; w.wg.Done() }()
			w.process(t, msg)
		}()
	},
		jetstream.PullMaxMessages(t.cfg.Concurrency),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			w.log.Debug("consume", slog.String("tool", t.name), slog.Any("err", err))
		}))
	if err != nil {
		return err
	}
	t.cc = cc
	return nil
}

// pause stops pulling jobs of t; jobs already taken finish.
func (w *Worker) pause(t *tool, closing bool) jetstream.ConsumeContext {
	t.ccMu.Lock()
	defer t.ccMu.Unlock()
	if closing {
		t.closed = true
	}
	cc := t.cc
	t.cc = nil
	if cc != nil {
		cc.Drain()
	}
	return cc
}

// gate pauses and resumes pulling jobs of t as its Ready function says.
func (w *Worker) gate(t *tool) {
	defer w.loops.Done()
	tick := time.NewTicker(t.cfg.ReadyInterval)
	defer tick.Stop()
	paused := true
	for {
		ready := t.cfg.Ready()
		switch {
		case ready && paused:
			if err := w.resume(t); err != nil {
				w.log.Warn("resume pulling", slog.String("tool", t.name), slog.Any("err", err))
			} else {
				paused = false
				w.log.Info("tool ready: pulling jobs", slog.String("tool", t.name))
			}
		case !ready && !paused:
			if cc := w.pause(t, false); cc != nil {
				<-cc.Closed()
			}
			paused = true
			w.log.Warn("tool not ready: stopped pulling jobs", slog.String("tool", t.name))
		}
		select {
		case <-w.runCtx.Done():
			return
		case <-tick.C:
		}
	}
}

// heartbeats sends InProgress for jobs that run longer than a third of their
// ack wait, so JetStream does not redeliver them.
func (w *Worker) heartbeats() {
	defer w.loops.Done()
	period := w.minAckWait() / 3
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-w.runCtx.Done():
			return
		case now := <-tick.C:
			w.mu.Lock()
			var due []jetstream.Msg
			for _, f := range w.inflight {
				if now.Sub(f.started) >= f.ackWait/3 {
					due = append(due, f.msg)
				}
			}
			w.mu.Unlock()
			for _, m := range due {
				_ = m.InProgress()
			}
		}
	}
}

func (w *Worker) minAckWait() time.Duration {
	m := w.cfg.Tool.AckWait
	for _, t := range w.tools {
		m = min(m, t.cfg.AckWait)
	}
	return m
}
