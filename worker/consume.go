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
	"golang.org/x/sync/errgroup"

	"github.com/toolq/toolq/contracts"
)

func (w *Worker) startTool(ctx context.Context, t *tool) error {
	stream := w.cfg.Subjects.JobsStream()
	if t.tenant != "" {
		stream = w.cfg.Subjects.TenantJobsStream(t.tenant)
	}
	made, err := w.makeConsumers(ctx, stream, t)
	if err != nil {
		return err
	}
	t.levels = made
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

// level is one priority level of a tool (or tenant twin), or one session
// lane of it: its consumer.
type level struct {
	prio contracts.Priority
	lane int
	cons jetstream.Consumer
}

// makeConsumers makes the consumers of t in stream: one a level (only normal
// for a NormalOnly tool), taking every session lane's subjects; with
// Config.SessionLanes, one a level and lane instead (a NormalOnly tool's
// one takes its plain subject only). The consumers of a step are made at
// once: a worker's start waits for one or two round trips a tool.
//
// Switching between the two ways moves the lanes' jobs from one consumer
// to another without running a delivered job twice or leaving a queued one
// behind (splitLevel, foldLanes; RATIONALE "Fairness between sessions").
func (w *Worker) makeConsumers(ctx context.Context, stream string, t *tool) ([]*level, error) {
	var levels []contracts.Priority
	for _, p := range contracts.Priorities {
		if !t.cfg.NormalOnly || p == contracts.PriorityNormal {
			levels = append(levels, p)
		}
	}
	if t.cfg.NormalOnly {
		return w.makeLevels(ctx, stream, t, levels, 0, false)
	}
	if w.cfg.SessionLanes {
		return w.makeApart(ctx, stream, t, levels)
	}
	base, err := w.makeLevels(ctx, stream, t, levels, 0, false)
	if err == nil || !isOverlap(err) {
		return base, err
	}
	// A worker with lanes apart made their consumers: fold them into the
	// levels' once nothing they delivered is in flight.
	folded, err := w.foldLanes(ctx, stream, t, levels)
	if err != nil {
		return nil, err
	}
	if !folded {
		w.log.Warn("session lanes stay apart: jobs they delivered were still running", slog.String("tool", t.name),
			slog.String("stream", stream), slog.Duration("waited", w.cfg.StopTimeout))
		return w.makeApart(ctx, stream, t, levels)
	}
	return w.makeLevels(ctx, stream, t, levels, 0, false)
}

// makeApart makes a consumer for each level and lane of t, splitting the
// levels whose consumer still takes every lane first. A level that cannot
// be split yet (a job it delivered still runs at the deadline) keeps its
// one consumer for all lanes until a later start.
func (w *Worker) makeApart(ctx context.Context, stream string, t *tool, levels []contracts.Priority) ([]*level, error) {
	var made []*level
	for _, p := range levels {
		split, err := w.splitLevel(ctx, stream, t, p)
		if err != nil {
			return nil, err
		}
		if !split {
			w.log.Warn("session lanes stay folded: jobs the level's consumer delivered were still running", slog.String("tool", t.name),
				slog.String("stream", stream), slog.String("priority", string(p)), slog.Duration("waited", w.cfg.StopTimeout))
			more, err := w.makeLevels(ctx, stream, t, []contracts.Priority{p}, 0, false)
			if err != nil {
				return nil, err
			}
			made = append(made, more...)
			continue
		}
		for lane := range contracts.SessionLanes {
			more, err := w.makeLevels(ctx, stream, t, []contracts.Priority{p}, lane, true)
			if err != nil {
				return nil, err
			}
			made = append(made, more...)
		}
	}
	return made, nil
}

// splitLevel narrows level p's consumer of t to lane 0 when it takes
// every lane, so that the lanes can get consumers of their own. A job that
// consumer delivered may still be running, and a work-queue consumer can
// only start at the stream's start: a lane's new consumer would deliver
// that job a second time while it runs (the narrowed consumer still owns
// it: its ack counts, and it redelivers it after its ack wait). So the
// level's consumer is paused and split only once nothing it delivered is
// pending; everything left in the stream has then never been delivered,
// and each lane's consumer takes its part once. It reports false, with the
// consumer resumed as it was, when a delivery was still pending at the
// deadline (the stop timeout).
func (w *Worker) splitLevel(ctx context.Context, stream string, t *tool, p contracts.Priority) (bool, error) {
	name := w.cfg.Subjects.ConsumerNameAt(t.name, p)
	cons, err := w.js.Consumer(ctx, stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("worker: split lanes of %s: %w", t.name, err)
	}
	if len(cons.CachedInfo().Config.FilterSubjects) <= 1 {
		return true, nil // split already
	}
	names := []string{name}
	quiet, err := w.quiesce(ctx, stream, names)
	if err != nil || !quiet {
		return false, err
	}
	defer w.resumeAll(ctx, stream, names)
	if _, err := w.js.CreateOrUpdateConsumer(ctx, stream, w.consumerConfig(t, p, 0, true)); err != nil {
		return false, fmt.Errorf("worker: split lanes of %s: narrow: %w", t.name, err)
	}
	return true, nil
}

// foldLanes removes the consumers of t's levels and lanes, so that each
// level gets one consumer taking every lane, once nothing they delivered
// is running. A widened level's consumer would go on from its own last
// delivery, past the queued jobs of lanes whose consumers were behind it,
// and a job a removed consumer delivered could no longer be acknowledged
// and would be delivered again while it runs. So every consumer of t is
// paused, and once none has a delivery pending (within the stop timeout)
// all are deleted: the level's new consumer delivers what is left in the
// stream, from its start, none of it delivered before. It reports false,
// with every consumer resumed and kept, when a delivery was still pending
// at the deadline (a long or parked job): the lanes then stay apart.
func (w *Worker) foldLanes(ctx context.Context, stream string, t *tool, levels []contracts.Priority) (bool, error) {
	var names []string
	for _, p := range levels {
		for lane := range contracts.SessionLanes {
			names = append(names, w.cfg.Subjects.ConsumerNameLane(t.name, p, lane))
		}
	}
	quiet, err := w.quiesce(ctx, stream, names)
	if err != nil || !quiet {
		return false, err
	}
	for _, name := range names {
		if err := w.js.DeleteConsumer(ctx, stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			w.resumeAll(ctx, stream, names)
			return false, fmt.Errorf("worker: fold lanes of %s: %w", t.name, err)
		}
	}
	return true, nil
}

// quiesce pauses the consumers names of stream (those that exist) and
// waits until none has a delivery pending: true, with them still paused.
// At the stop timeout it resumes them and reports false.
func (w *Worker) quiesce(ctx context.Context, stream string, names []string) (bool, error) {
	until := time.Now().Add(w.cfg.StopTimeout)
	for _, name := range names {
		if _, err := w.js.PauseConsumer(ctx, stream, name, until); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			w.resumeAll(ctx, stream, names)
			return false, fmt.Errorf("worker: pause %s: %w", name, err)
		}
	}
	for {
		pending := 0
		for _, name := range names {
			cons, err := w.js.Consumer(ctx, stream, name)
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				continue
			}
			if err != nil {
				w.resumeAll(ctx, stream, names)
				return false, fmt.Errorf("worker: %s: %w", name, err)
			}
			pending += cons.CachedInfo().NumAckPending
		}
		if pending == 0 {
			return true, nil
		}
		if time.Now().After(until.Add(-time.Second)) {
			w.resumeAll(ctx, stream, names)
			return false, nil
		}
		select {
		case <-ctx.Done():
			w.resumeAll(ctx, stream, names)
			return false, ctx.Err()
		case <-time.After(100 * time.Millisecond): // polling the server's count
		}
	}
}

// resumeAll resumes the consumers names of stream that exist.
func (w *Worker) resumeAll(ctx context.Context, stream string, names []string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, name := range names {
		if _, err := w.js.ResumeConsumer(rctx, stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			w.log.Warn("cannot resume a consumer after a lane switch", slog.String("consumer", name), slog.Any("err", err))
		}
	}
}

// isOverlap reports the server's refusal of a work-queue consumer whose
// filter overlaps another's (JSConsumerWQConsumerNotUniqueErr).
func isOverlap(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == errWQConsumerNotUnique
}

// errWQConsumerNotUnique is the server's code for a work-queue consumer
// whose filter overlaps another consumer's.
const errWQConsumerNotUnique jetstream.ErrorCode = 10100

// consumerConfig is the configuration of t's consumer of level p on lane
// (apart), or on every lane (not apart: lane is 0).
func (w *Worker) consumerConfig(t *tool, p contracts.Priority, lane int, apart bool) jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		Durable:       w.cfg.Subjects.ConsumerNameLane(t.name, p, lane),
		Description:   "toolq workers of " + t.name + " at priority " + string(p),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       t.cfg.AckWait,
		MaxDeliver:    t.cfg.Retry.MaxAttempts,
		MaxAckPending: t.cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	switch {
	case apart && lane > 0:
		cfg.Description += fmt.Sprintf(", session lane %d", lane)
		cfg.FilterSubject = w.cfg.Subjects.TenantJobLane(t.tenant, t.name, p, lane)
	case apart || t.cfg.NormalOnly:
		cfg.FilterSubject = w.cfg.Subjects.TenantJobAt(t.tenant, t.name, p)
	default:
		cfg.FilterSubjects = w.cfg.Subjects.TenantJobLanes(t.tenant, t.name, p)
	}
	return cfg
}

// makeLevels makes one consumer of t for each of levels, on lane (apart),
// or on every lane (not apart: lane is 0).
func (w *Worker) makeLevels(ctx context.Context, stream string, t *tool, levels []contracts.Priority, lane int, apart bool) ([]*level, error) {
	made := make([]*level, len(levels))
	var g errgroup.Group
	for i, p := range levels {
		g.Go(func() error {
			cfg := w.consumerConfig(t, p, lane, apart)
			cons, err := w.js.CreateOrUpdateConsumer(ctx, stream, cfg)
			if err != nil {
				return fmt.Errorf("worker: consumer for %s at %s: %w", t.name, p, err)
			}
			made[i] = &level{prio: p, lane: lane, cons: cons}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return made, nil
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
	p.loops.Add(len(t.levels))
	for _, l := range t.levels {
		w.wg.Add(1) // the loop dispatches jobs: Stop waits for it with them
		go func() {
			defer w.wg.Done()
			defer p.loops.Done()
			w.pull(t, l, p)
		}()
	}
	go func() { p.loops.Wait(); close(p.closed) }()
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

// puller is one tool's pull loops, one a level (of the tool's own stream,
// or a tenant twin's).
type puller struct {
	stop   chan struct{}
	closed chan struct{}
	once   sync.Once
	loops  sync.WaitGroup
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

// Closed is closed when the loops have ended: no pull is outstanding.
func (p *puller) Closed() <-chan struct{} { return p.closed }

// pull takes jobs of one level of t only when it has a free slot for each
// (the slots are the tool's, shared with its other levels and tenant
// twins, and granted in the order of slots): a job is never left in a
// buffer while its ack wait runs out. With a slot, it takes what is queued,
// up to the slots nobody else waits for, without waiting (a fetch that
// does not wait). With nothing queued, it gives the slot back and waits
// for one job holding none (a fetch the server answers as soon as one
// arrives, or after pullWait), so an idle level or tenant keeps no slot
// from busy ones. A job that arrives so is held, with heartbeats, until
// its slot is granted. A stop lets the outstanding fetch end, so no job
// the server sent is dropped on the way (a subscription ended under an
// open pull request loses what is in flight until its ack wait).
func (w *Worker) pull(t *tool, l *level, p *puller) {
	backoff := 50 * time.Millisecond
	var next *slotWaiter // the loop's place in line for its next slot
	defer func() {
		if next != nil {
			t.slots.cancel(next)
		}
	}()
	for !p.stopping() {
		err := w.fetch(t, l, p, &next)
		if err == nil {
			backoff = 50 * time.Millisecond
			continue
		}
		w.log.Debug("pull", slog.String("tool", t.name), slog.String("tenant", t.tenant),
			slog.String("priority", string(l.prio)), slog.Any("err", err))
		select {
		case <-p.stop:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func (t *tool) class(l *level, held bool) slotClass {
	return slotClass{tenant: t.tenant, weight: int(t.weight.Load()), level: l.prio, held: held}
}

// fetch takes the jobs of l that it has slots for, and runs each in one.
// While they run, the loop is already in line for its next slot (*next), so
// a busy level does not lose the slot its job frees to a lower one only
// because its loop was not back in line yet.
func (w *Worker) fetch(t *tool, l *level, p *puller, next **slotWaiter) error {
	// Jobs that wait for their concurrency key hold no slot; past
	// ConcurrencyWaiters of them, the tool takes no more jobs here until
	// some run, so one key's backlog is not drained into this worker.
	for t.parked.Load() >= int64(t.cfg.ConcurrencyWaiters) {
		select {
		case <-p.stop:
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
	c := t.class(l, false)
	if *next == nil {
		*next = t.slots.enqueue(c)
	}
	granted := t.slots.wait(*next, p.stop, 0, nil)
	*next = nil
	if !granted {
		return nil
	}
	queued := t.slots.enqueue(c)
	n := 1 + t.slots.tryAcquire(c, t.slots.size-1, queued)
	batch, err := l.cons.FetchNoWait(n)
	if err != nil {
		t.slots.release(n)
		t.slots.cancel(queued)
		return err
	}
	got := w.dispatch(t, l, batch)
	t.slots.release(n - got)
	if got > 0 || batch.Error() != nil {
		*next = queued
		return batch.Error()
	}
	t.slots.cancel(queued)
	if p.stopping() {
		return nil
	}
	// Nothing queued: wait for the next job holding no slot.
	batch, err = l.cons.Fetch(1, jetstream.FetchMaxWait(w.pullWait()))
	if err != nil {
		return err
	}
	for msg := range batch.Messages() {
		beat := func() { _ = msg.InProgress() }
		if !t.slots.acquire(p.stop, t.class(l, true), t.cfg.AckWait/3, beat) {
			// Stopping before a slot was free: another worker takes it
			// now rather than after its ack wait.
			_ = msg.Nak()
			continue
		}
		w.run(t, l, msg)
	}
	if errors.Is(batch.Error(), nats.ErrTimeout) {
		return nil
	}
	return batch.Error()
}

// dispatch runs every job of batch in a slot already taken for it and
// returns how many it ran.
func (w *Worker) dispatch(t *tool, l *level, batch jetstream.MessageBatch) int {
	got := 0
	for msg := range batch.Messages() {
		got++
		w.run(t, l, msg)
	}
	return got
}

// run runs one job in a slot taken for it, and gives the slot back.
func (w *Worker) run(t *tool, l *level, msg jetstream.Msg) {
	t.slots.started(t.class(l, false))
	w.wg.Add(1)
	w.runners.do(w.runCtx, &w.loops, func() {
		h := &slotHold{slots: t.slots, class: t.class(l, true), held: true}
		defer func() {
			if h.held {
				t.slots.release(1)
			}
			w.wg.Done()
		}()
		w.process(t, l.prio, msg, h)
	})
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
