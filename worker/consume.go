package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
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
	t.spanName = "toolq.job " + t.name
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
	p := &puller{stop: make(chan struct{}), closed: make(chan struct{})}
	t.cc = p
	w.wg.Add(1) // the loop dispatches jobs: Stop waits for it with them
	go func() {
		defer w.wg.Done()
		w.pull(t, p)
	}()
	return nil
}

// pause stops pulling jobs of t; jobs already taken finish. The returned
// puller's Closed is closed once no pull is outstanding.
func (w *Worker) pause(t *tool, closing bool) *puller {
	t.ccMu.Lock()
	defer t.ccMu.Unlock()
	if closing {
		t.closed = true
	}
	p := t.cc
	t.cc = nil
	if p != nil {
		p.Drain()
	}
	return p
}

// pullWait is how long a pull for one job waits for it when the queue is
// empty, and so how long a stop may wait for the last pull to end: an
// eighth of the stop timeout, within [100 ms, 1 s] (idle, a consumer
// costs one request a pullWait).
func (w *Worker) pullWait() time.Duration {
	return min(max(w.cfg.StopTimeout/8, 100*time.Millisecond), time.Second)
}

// puller is one tool's pull loop (of the tool's own stream, or a tenant
// twin's).
type puller struct {
	stop   chan struct{}
	closed chan struct{}
	once   sync.Once
}

// Drain ends the loop after its outstanding pull.
func (p *puller) Drain() { p.once.Do(func() { close(p.stop) }) }

func (p *puller) stopping() bool {
	select {
	case <-p.stop:
		return true
	default:
		return false
	}
}

// Closed is closed when the loop has ended: no pull is outstanding.
func (p *puller) Closed() <-chan struct{} { return p.closed }

// pull takes jobs of t only when it has a free slot for each (the slots
// are the tool's, shared with its tenant twins): a job is never held in a
// buffer, waiting for a slot while its ack wait runs out. It takes what
// is queued, up to its free slots, without waiting (a fetch that does not
// wait); with nothing queued it waits for one job (a fetch the server
// answers as soon as one arrives, or after pullWait). A stop lets the
// outstanding fetch end, so no job the server sent is dropped on the way
// (a subscription ended under an open pull request loses what is in
// flight until its ack wait).
func (w *Worker) pull(t *tool, p *puller) {
	defer close(p.closed)
	backoff := 50 * time.Millisecond
	for {
		if p.stopping() {
			return
		}
		select {
		case t.sem <- struct{}{}:
		case <-p.stop:
			return
		}
		n := 1
	more:
		for n < cap(t.sem) {
			select {
			case t.sem <- struct{}{}:
				n++
			default:
				break more
			}
		}
		err := w.fetch(t, p, n)
		if err == nil {
			backoff = 50 * time.Millisecond
			continue
		}
		w.log.Debug("pull", slog.String("tool", t.name), slog.String("tenant", t.tenant), slog.Any("err", err))
		select {
		case <-p.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// fetch takes up to n jobs of t holding n slots, runs each in one and
// gives the slots it did not use back.
func (w *Worker) fetch(t *tool, p *puller, n int) error {
	batch, err := t.cons.FetchNoWait(n)
	if err != nil {
		releaseSlots(t, n)
		return err
	}
	got := w.dispatch(t, batch)
	if got > 0 || batch.Error() != nil {
		releaseSlots(t, n-got)
		return batch.Error()
	}
	if p.stopping() {
		releaseSlots(t, n)
		return nil
	}
	// Nothing queued: one slot waits for the next job.
	releaseSlots(t, n-1)
	batch, err = t.cons.Fetch(1, jetstream.FetchMaxWait(w.pullWait()))
	if err != nil {
		releaseSlots(t, 1)
		return err
	}
	got = w.dispatch(t, batch)
	releaseSlots(t, 1-got)
	if errors.Is(batch.Error(), nats.ErrTimeout) {
		return nil
	}
	return batch.Error()
}

// dispatch runs every job of batch in a slot already taken for it and
// returns how many it ran.
func (w *Worker) dispatch(t *tool, batch jetstream.MessageBatch) int {
	got := 0
	for msg := range batch.Messages() {
		got++
		w.wg.Add(1)
		go func() {
			defer func() { <-t.sem; w.wg.Done() }()
			w.process(t, msg)
		}()
	}
	return got
}

func releaseSlots(t *tool, n int) {
	for range n {
		<-t.sem
	}
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
