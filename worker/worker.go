package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

// Handler runs the jobs of one tool. It returns the result (any JSON value)
// or an error: a *contracts.Error is reported with its code and retried only
// when Retryable; Permanent and RetryAfter steer retries; any other error is
// retried and reported as internal_error.
type Handler interface {
	Handle(ctx context.Context, job *contracts.Job) (json.RawMessage, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *contracts.Job) (json.RawMessage, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
	return f(ctx, job)
}

// Causes of a running job's context ending early.
var (
	errJobCancelled = errors.New("job cancelled")
	errShutdown     = errors.New("worker shutting down")
)

// Worker consumes jobs of its registered tools from JetStream, runs them and
// publishes their events. Many workers (processes) share one durable consumer
// per tool.
type Worker struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	cfg    Config
	log    *slog.Logger
	source string

	mu       sync.Mutex
	tools    map[string]*tool
	started  bool
	stopping bool
	inflight map[string]*inflight // by job id
	cancels  map[string]time.Time // cancelled job ids

	events  *bus.Events
	jobs    jetstream.Stream
	subs    []*nats.Subscription
	watcher jetstream.KeyWatcher

	runCtx    context.Context // parent of every job's context
	runCancel context.CancelCauseFunc
	wg        sync.WaitGroup // jobs
	loops     sync.WaitGroup // owned background loops
	stopOnce  sync.Once
	stopped   chan struct{}
}

type tool struct {
	name    string
	handler Handler
	cfg     ToolConfig
	sem     chan struct{}
	cons    jetstream.Consumer

	ccMu   sync.Mutex
	cc     jetstream.ConsumeContext // nil while paused
	closed bool
}

type inflight struct {
	msg     jetstream.Msg
	cancel  context.CancelCauseFunc
	started time.Time
	ackWait time.Duration
}

// New returns a worker on connection nc. Register tools, then Start it.
func New(nc *nats.Conn, cfg *Config) (*Worker, error) {
	if nc == nil {
		return nil, errors.New("worker: nil connection")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("worker: jetstream: %w", err)
	}
	w := &Worker{
		nc:       nc,
		js:       js,
		cfg:      c,
		log:      c.Logger.With(slog.String("worker", c.Name)),
		source:   "/toolq/worker/" + c.Name,
		tools:    map[string]*tool{},
		inflight: map[string]*inflight{},
		cancels:  map[string]time.Time{},
		stopped:  make(chan struct{}),
	}
	if !c.DisableBuiltins {
		for name, b := range builtins() {
			if err := w.Register(name, b.handler, &ToolConfig{Catalog: b.catalog}); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}

// Name is the worker's name as it appears in events.
func (w *Worker) Name() string { return w.cfg.Name }

// Register adds a tool. cfg overrides the worker's default tool configuration
// field by field; nil keeps the defaults.
func (w *Worker) Register(name string, h Handler, cfg *ToolConfig) error {
	if err := contracts.ValidateTool(name); err != nil {
		return fmt.Errorf("worker: register: %w", err)
	}
	if h == nil {
		return errors.New("worker: register: nil handler")
	}
	var tc ToolConfig
	if cfg != nil {
		tc = *cfg
	}
	tc, err := tc.withDefaults(w.cfg.Tool)
	if err != nil {
		return fmt.Errorf("worker: register %s: %w", name, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return ErrStarted
	}
	if _, ok := w.tools[name]; ok {
		return fmt.Errorf("%w: %s", ErrDuplicateTool, name)
	}
	w.tools[name] = &tool{name: name, handler: h, cfg: tc, sem: make(chan struct{}, tc.Concurrency)}
	return nil
}

// Tools returns the names of the registered tools.
func (w *Worker) Tools() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	names := make([]string, 0, len(w.tools))
	for n := range w.tools {
		names = append(names, n)
	}
	return names
}

// Start creates or updates the streams and consumers and starts pulling jobs.
// It returns once the worker is consuming.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return ErrStarted
	}
	w.started = true
	w.mu.Unlock()

	err := bus.Ensure(ctx, w.js, bus.Config{
		Subjects: w.cfg.Subjects, Replicas: w.cfg.Replicas, Storage: w.cfg.Storage,
		EventsMaxAge: w.cfg.EventsMaxAge,
	})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if w.events, err = bus.NewEvents(ctx, w.js, w.cfg.Subjects); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if w.jobs, err = w.js.Stream(ctx, w.cfg.Subjects.JobsStream()); err != nil {
		return fmt.Errorf("worker: jobs stream: %w", err)
	}
	w.runCtx, w.runCancel = context.WithCancelCause(context.Background())

	if err := w.startCancelWatch(ctx); err != nil {
		w.abortStart()
		return err
	}
	sub, err := w.nc.Subscribe(w.cfg.Subjects.Cancels(), w.onCancelMsg)
	if err != nil {
		w.abortStart()
		return fmt.Errorf("worker: subscribe cancels: %w", err)
	}
	w.subs = append(w.subs, sub)
	adv := w.cfg.Subjects.MaxDeliveriesAdvisories()
	if sub, err = w.nc.Subscribe(adv, w.onMaxDeliveries); err != nil {
		w.abortStart()
		return fmt.Errorf("worker: subscribe advisories: %w", err)
	}
	w.subs = append(w.subs, sub)

	if err := w.registerCatalog(ctx); err != nil {
		w.abortStart()
		return err
	}
	for _, t := range w.tools {
		if err := w.startTool(ctx, t); err != nil {
			w.abortStart()
			return err
		}
	}
	w.loops.Add(1)
	go w.heartbeats()
	w.log.Info("worker started", slog.Int("tools", len(w.tools)))
	return nil
}

func (w *Worker) abortStart() {
	w.stopPulling()
	w.runCancel(errShutdown)
	w.loops.Wait()
	w.stopOnce.Do(func() { close(w.stopped) })
}

func (w *Worker) startTool(ctx context.Context, t *tool) error {
	cons, err := w.js.CreateOrUpdateConsumer(ctx, w.cfg.Subjects.JobsStream(), jetstream.ConsumerConfig{
		Durable:       w.cfg.Subjects.ConsumerName(t.name),
		Description:   "toolq workers of " + t.name,
		FilterSubject: w.cfg.Subjects.Job(t.name),
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

// registerCatalog writes the catalog entries of the tools that have one.
func (w *Worker) registerCatalog(ctx context.Context) error {
	var kv jetstream.KeyValue
	for _, t := range w.tools {
		c := t.cfg.Catalog
		if c == nil || contracts.IsCodeModeTool(t.name) {
			continue
		}
		if kv == nil {
			var err error
			if kv, err = w.js.KeyValue(ctx, w.cfg.Subjects.CatalogBucket()); err != nil {
				return fmt.Errorf("worker: catalog bucket: %w", err)
			}
		}
		entry := *c
		entry.Tool = t.name
		if entry.Source == "" {
			entry.Source = contracts.SourceToolq
		}
		if entry.Name == "" {
			entry.Name = strings.ReplaceAll(t.name, ".", "_")
		}
		if entry.ID == "" {
			entry.ID = entry.Source + ":core:" + strings.ReplaceAll(t.name, ".", "_")
		}
		entry.UpdatedAt = time.Now().UTC()
		if err := entry.Validate(); err != nil {
			return fmt.Errorf("worker: catalog entry of %s: %w", t.name, err)
		}
		data, err := json.Marshal(entry)
		if err != nil {
			return err
		}
		if _, err := kv.Put(ctx, contracts.CatalogKey(entry.ID), data); err != nil {
			return fmt.Errorf("worker: register %s in the catalog: %w", entry.ID, err)
		}
	}
	return nil
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

// Stopped is closed when the worker has stopped.
func (w *Worker) Stopped() <-chan struct{} { return w.stopped }

// Stop stops pulling jobs, lets in-flight jobs finish until ctx ends or
// StopTimeout passes, then cancels the rest; a cancelled job is handed back
// to JetStream at once for another worker. Stop before Start and a second
// Stop are harmless.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if !w.started || w.stopping {
		w.mu.Unlock()
		if !w.started {
			return nil
		}
		select {
		case <-w.stopped:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	w.stopping = true
	w.mu.Unlock()

	w.stopPulling()
	soft, cancel := context.WithTimeout(ctx, w.cfg.StopTimeout)
	defer cancel()
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-soft.Done():
		w.log.Warn("stop: cancelling in-flight jobs")
		w.runCancel(errShutdown)
		<-done
	}
	w.runCancel(errShutdown)
	w.loops.Wait()
	w.stopOnce.Do(func() { close(w.stopped) })
	w.log.Info("worker stopped")
	return nil
}

func (w *Worker) stopPulling() {
	var ccs []jetstream.ConsumeContext
	for _, t := range w.tools {
		if cc := w.pause(t, true); cc != nil {
			ccs = append(ccs, cc)
		}
	}
	for _, cc := range ccs {
		<-cc.Closed()
	}
	for _, s := range w.subs {
		_ = s.Unsubscribe()
	}
	if w.watcher != nil {
		_ = w.watcher.Stop()
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

// process runs one delivery of a job from start to ack.
func (w *Worker) process(t *tool, msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		w.log.Error("job without metadata", slog.Any("err", err))
		_ = msg.Term()
		return
	}
	attempt := int(md.NumDelivered) //nolint:gosec // G115: at most the consumer's MaxDeliver, an int
	job, err := contracts.DecodeJob(msg.Data())
	if err == nil && job.Tool != t.name {
		err = contracts.Errorf(contracts.CodeInvalidInput, "job tool %q does not match subject tool %q", job.Tool, t.name)
	}
	if err != nil {
		w.reject(t, msg, attempt, err)
		return
	}
	log := w.log.With(slog.String("job", job.ID), slog.String("tool", t.name), slog.Int("attempt", attempt))

	// The first delivery runs without a lookup; only a redelivery asks the
	// result store whether the job already ended.
	var lastSeq uint64
	if attempt > 1 {
		var (
			ev  *contracts.Event
			seq uint64
		)
		err := w.retry(msg, func(ctx context.Context) error {
			var err error
			ev, seq, err = w.events.Last(ctx, job.Session, job.ID)
			return err
		})
		if err != nil && ev == nil && seq == 0 {
			log.Warn("redelivered job: result store unreadable; retrying later", slog.Any("err", err))
			_ = msg.NakWithDelay(time.Second)
			return
		}
		if ev != nil && ev.Data.Status.Terminal() {
			log.Debug("redelivered job already ended; answering from its event", slog.String("status", string(ev.Data.Status)))
			w.ackEnded(log, msg, job, ev)
			return
		}
		lastSeq = seq
	}
	if w.isCancelled(job.ID) {
		w.finish(log, msg, job, attempt, lastSeq, contracts.StatusCancelled, nil, contracts.Errorf(contracts.CodeCancelled, "job was cancelled before it started"))
		return
	}
	maxAttempts := t.cfg.Retry.MaxAttempts
	if job.MaxAttempts > 0 && job.MaxAttempts < maxAttempts {
		maxAttempts = job.MaxAttempts
	}
	if attempt > maxAttempts {
		w.deadLetter(log, msg, t, job, attempt-1, lastSeq,
			contracts.Errorf(contracts.CodeInternalError, "attempts exhausted: the worker running attempt %d stopped without an answer", attempt-1))
		return
	}

	ctx, cancel := context.WithCancelCause(w.runCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, job.Timeout(t.cfg.Timeout))
	defer cancelTimeout()
	if tp := msg.Headers().Get(bus.HeaderTraceParent); tp != "" {
		ctx = withTraceParent(ctx, tp)
	}
	w.mu.Lock()
	w.inflight[job.ID] = &inflight{msg: msg, cancel: cancel, started: time.Now(), ackWait: t.cfg.AckWait}
	cancelled := w.cancelledLocked(job.ID)
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.inflight, job.ID)
		w.mu.Unlock()
		cancel(nil)
	}()
	if cancelled {
		cancel(errJobCancelled)
	}

	if job.Progress {
		ev := contracts.NewEvent(w.source, job, contracts.StatusRunning, attempt, time.Now())
		ev.Data.Attempt = attempt
		seq, err := w.events.Publish(ctx, ev, lastSeq, traceParent(ctx))
		switch {
		case errors.Is(err, bus.ErrConflict):
			if w.endedElsewhere(log, msg, job) {
				return
			}
		case err != nil:
			log.Warn("running event not published", slog.Any("err", err))
		default:
			lastSeq = seq
		}
	}

	result, herr := w.call(ctx, t, job)
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, errShutdown):
		log.Info("job interrupted by shutdown; handing it back")
		_ = msg.Nak()
		return
	case errors.Is(cause, errJobCancelled):
		w.finish(log, msg, job, attempt, lastSeq, contracts.StatusCancelled, nil, contracts.Errorf(contracts.CodeCancelled, "job was cancelled while running"))
		return
	}
	var park *ParkError
	if errors.As(herr, &park) && park.Status.Parked() && json.Valid(result) {
		w.park(log, msg, job, attempt, lastSeq, park, result)
		return
	}
	var denied *DeniedError
	if errors.As(herr, &denied) {
		if !json.Valid(result) {
			result = nil
		}
		log.Info("job denied", slog.String("reason", denied.Reason))
		w.finish(log, msg, job, attempt, lastSeq, contracts.StatusDenied, result, contracts.Errorf(contracts.CodeDenied, "%s", denied.Reason))
		return
	}
	if herr == nil {
		if len(result) == 0 {
			result = json.RawMessage("null")
		}
		switch {
		case len(result) > w.cfg.MaxResultBytes:
			herr = contracts.Errorf(contracts.CodeOutputLimitExceeded, "result of %d bytes exceeds the limit of %d", len(result), w.cfg.MaxResultBytes)
		case !json.Valid(result):
			herr = contracts.Errorf(contracts.CodeInternalError, "handler returned a result that is not valid JSON")
		default:
			w.finish(log, msg, job, attempt, lastSeq, contracts.StatusCompleted, result, nil)
			return
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && !errors.Is(herr, contracts.ErrTimeout) {
		herr = &contracts.Error{Code: contracts.CodeTimeout, Message: fmt.Sprintf("attempt exceeded its timeout of %s", job.Timeout(t.cfg.Timeout)), Retryable: true}
	}
	werr, retry, delay := classify(herr)
	if delay == 0 {
		delay = t.cfg.Retry.Delay(attempt)
	}
	switch {
	case !retry:
		log.Info("job failed permanently", slog.String("code", string(werr.Code)), slog.String("error", werr.Message))
		w.finish(log, msg, job, attempt, lastSeq, contracts.StatusFailed, nil, werr)
	case attempt >= maxAttempts:
		w.deadLetter(log, msg, t, job, attempt, lastSeq, werr)
	default:
		log.Info("job failed; retrying", slog.Duration("delay", delay), slog.String("error", werr.Message))
		_ = msg.NakWithDelay(delay)
	}
}

// call runs the handler, turning a panic into an internal_error.
func (w *Worker) call(ctx context.Context, t *tool, job *contracts.Job) (res json.RawMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			w.log.Error("handler panicked", slog.String("tool", t.name), slog.String("job", job.ID),
				slog.Any("panic", r), slog.String("stack", string(debug.Stack())))
			res = nil
			err = Permanent(contracts.Errorf(contracts.CodeInternalError, "handler panicked: %v", r))
		}
	}()
	return t.handler.Handle(ctx, job)
}

// classify maps a handler error onto its wire form and the retry decision.
func classify(err error) (werr *contracts.Error, retry bool, delay time.Duration) {
	var pe *PermanentError
	if errors.As(err, &pe) {
		return contracts.AsError(pe.Err), false, 0
	}
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		return contracts.AsError(ra.Err), true, ra.Delay
	}
	var ce *contracts.Error
	if errors.As(err, &ce) {
		return ce, ce.Retryable, 0
	}
	return &contracts.Error{Code: contracts.CodeInternalError, Message: err.Error(), Retryable: true}, true, 0
}

// finish publishes the job's terminal event and then acknowledges the
// message (Term for failures, so it is never redelivered). If the event
// cannot be stored the message is handed back for a later attempt.
func (w *Worker) finish(log *slog.Logger, msg jetstream.Msg, job *contracts.Job, attempt int, lastSeq uint64,
	status contracts.Status, result json.RawMessage, werr *contracts.Error,
) {
	ev := contracts.NewEvent(w.source, job, status, 1, time.Now())
	ev.Data.Attempt = attempt
	ev.Data.Result = result
	ev.Data.Error = werr
	err := w.retry(msg, func(ctx context.Context) error {
		_, err := w.events.Publish(ctx, ev, lastSeq, traceOf(msg))
		return err
	})
	if errors.Is(err, bus.ErrConflict) {
		if w.endedElsewhere(log, msg, job) {
			return
		}
		// Another delivery of the same job wrote a non-terminal event: take
		// the subject's current tail and try once more.
		err = w.retry(msg, func(ctx context.Context) error {
			_, seq, err := w.events.Last(ctx, job.Session, job.ID)
			if err != nil {
				return err
			}
			_, err = w.events.Publish(ctx, ev, seq, traceOf(msg))
			return err
		})
		if errors.Is(err, bus.ErrConflict) && w.endedElsewhere(log, msg, job) {
			return
		}
	}
	if err != nil {
		log.Warn("terminal event not stored; handing the job back", slog.Any("err", err))
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if err := w.retry(msg, func(ctx context.Context) error { return w.notifyParent(ctx, job, ev) }); err != nil {
		log.Warn("parent run not told; handing the job back", slog.Any("err", err))
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if status == contracts.StatusFailed {
		_ = msg.TermWithReason(string(werr.Code))
		return
	}
	_ = msg.Ack()
}

// retry runs op (a write to the bus that decides a job's outcome) until it
// succeeds, conflicts, or PublishRetry has passed, keeping the job's message
// alive meanwhile. A stream whose leader is being elected (a server of the
// cluster died) answers nothing for a few seconds; without this, that gap
// would throw away a finished job's result and cost it an attempt.
func (w *Worker) retry(msg jetstream.Msg, op func(ctx context.Context) error) error {
	deadline := time.Now().Add(w.cfg.PublishRetry)
	delay := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := op(ctx)
		cancel()
		if err == nil || errors.Is(err, bus.ErrConflict) || time.Now().After(deadline) {
			return err
		}
		_ = msg.InProgress()
		t := time.NewTimer(delay)
		select {
		case <-w.runCtx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// ackEnded acknowledges a job that already has its terminal event ev,
// telling its parent run first (again: that report is deduplicated).
func (w *Worker) ackEnded(log *slog.Logger, msg jetstream.Msg, job *contracts.Job, ev *contracts.Event) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.notifyParent(ctx, job, ev); err != nil {
		log.Warn("parent run not told; handing the job back", slog.Any("err", err))
		_ = msg.NakWithDelay(time.Second)
		return
	}
	_ = msg.Ack()
}

// notifyParent reports the end of a nested call to its code-mode run as a
// code_mode.result job, deduplicated by a deterministic id.
func (w *Worker) notifyParent(ctx context.Context, job *contracts.Job, ev *contracts.Event) error {
	if job.Parent == nil {
		return nil
	}
	tr := contracts.ToolResult{
		RunID: job.Parent.RunID, CallID: job.Parent.CallID, JobID: job.ID,
		Status: ev.Data.Status, Result: ev.Data.Result, Error: ev.Data.Error,
	}
	input, err := json.Marshal(tr)
	if err != nil {
		return err
	}
	nj := contracts.Job{
		ID: contracts.ToolResultJobID(job.ID), Tool: contracts.ToolCodeModeResult, Session: job.Session,
		Input: input, CreatedAt: time.Now().UTC(),
	}
	data, err := json.Marshal(nj)
	if err != nil {
		return err
	}
	_, err = w.js.Publish(ctx, w.cfg.Subjects.Job(nj.Tool), data, jetstream.WithMsgID(nj.ID))
	return err
}

// park publishes a parked event and acknowledges the message: the job's
// current step is over, the job is not.
func (w *Worker) park(log *slog.Logger, msg jetstream.Msg, job *contracts.Job, attempt int, lastSeq uint64, park *ParkError, result json.RawMessage) {
	ev := contracts.NewEvent(w.source, job, park.Status, park.N, time.Now())
	ev.Data.Attempt = attempt
	ev.Data.Result = result
	err := w.retry(msg, func(ctx context.Context) error {
		_, err := w.events.Publish(ctx, ev, lastSeq, traceOf(msg))
		return err
	})
	if errors.Is(err, bus.ErrConflict) && w.endedElsewhere(log, msg, job) {
		return
	}
	if err != nil {
		log.Warn("parked event not stored; handing the job back", slog.Any("err", err))
		_ = msg.NakWithDelay(time.Second)
		return
	}
	_ = msg.Ack()
}

// ErrJobEnded is returned by Emit when the job already has a terminal event.
var ErrJobEnded = errors.New("worker: job already ended")

// Emit writes the n-th event of status for a job other than the one being
// handled (a parked job being continued): after the job's current last
// event, and never after a terminal one. ref needs ID, Session and Tool.
func (w *Worker) Emit(ctx context.Context, ref *contracts.Job, status contracts.Status, n int, result json.RawMessage, werr *contracts.Error) error {
	if w.events == nil {
		return errors.New("worker: Emit before Start")
	}
	if err := contracts.ValidateID("job id", ref.ID); err != nil {
		return err
	}
	if err := contracts.ValidateID("session", ref.Session); err != nil {
		return err
	}
	job := *ref
	var ev *contracts.Event
	for range 5 {
		last, seq, err := w.events.Last(ctx, ref.Session, ref.ID)
		if err != nil {
			return err
		}
		if last != nil && last.Data.Status.Terminal() {
			return fmt.Errorf("%w: %s", ErrJobEnded, last.Data.Status)
		}
		// A parked nested call keeps its parent run: its events say so,
		// and its end is reported to the run.
		if job.Parent == nil && last != nil {
			job.Parent = last.Data.Parent
		}
		ev = contracts.NewEvent(w.source, &job, status, max(n, 1), time.Now())
		ev.Data.Result = result
		ev.Data.Error = werr
		_, err = w.events.Publish(ctx, ev, seq, traceParent(ctx))
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		if err != nil || !status.Terminal() {
			return err
		}
		return w.notifyParent(ctx, &job, ev)
	}
	return fmt.Errorf("worker: emit %s/%s: event subject kept moving", ref.ID, status)
}

// endedElsewhere reports (and acks) when the job's event subject already ends
// in a terminal event written by someone else (a cancel, another delivery).
func (w *Worker) endedElsewhere(log *slog.Logger, msg jetstream.Msg, job *contracts.Job) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, _, err := w.events.Last(ctx, job.Session, job.ID)
	if err != nil || ev == nil || !ev.Data.Status.Terminal() {
		return false
	}
	log.Debug("job already ended elsewhere", slog.String("status", string(ev.Data.Status)))
	w.ackEnded(log, msg, job, ev)
	return true
}

// deadLetter stores the job in the DLQ, then publishes its failed event, then
// removes it from the queue.
func (w *Worker) deadLetter(log *slog.Logger, msg jetstream.Msg, t *tool, job *contracts.Job, attempts int, lastSeq uint64, werr *contracts.Error) {
	werr = &contracts.Error{Code: werr.Code, Message: werr.Message, Details: werr.Details}
	if err := w.retry(msg, func(ctx context.Context) error { return w.publishDLQ(ctx, t.name, msg.Data(), job, attempts, werr) }); err != nil {
		log.Error("dead letter not stored; handing the job back", slog.Any("err", err))
		_ = msg.NakWithDelay(time.Second)
		return
	}
	log.Warn("job exhausted its attempts; moved to the DLQ", slog.Int("attempts", attempts), slog.String("error", werr.Message))
	w.finish(log, msg, job, attempts, lastSeq, contracts.StatusFailed, nil, werr)
}

func (w *Worker) publishDLQ(ctx context.Context, toolName string, raw []byte, job *contracts.Job, attempts int, werr *contracts.Error) error {
	dl := contracts.DeadLetter{
		Job: json.RawMessage(raw), Tool: toolName, Attempts: attempts,
		Error: werr, Worker: w.cfg.Name, Time: time.Now().UTC(),
	}
	if !json.Valid(raw) {
		dl.Job = nil
		b, _ := json.Marshal(string(raw))
		dl.Job = b
	}
	msgID := ""
	if job != nil {
		dl.JobID, dl.Session = job.ID, job.Session
		msgID = job.ID + "/dlq"
	}
	data, err := json.Marshal(dl)
	if err != nil {
		return err
	}
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	_, err = w.js.Publish(ctx, w.cfg.Subjects.DLQ(toolName), data, opts...)
	return err
}

// reject handles a job message that cannot be run: a failed event with
// invalid_input when the message names a valid job and session, the DLQ when
// it does not (there is nobody to tell); never redelivered.
func (w *Worker) reject(t *tool, msg jetstream.Msg, attempt int, cause error) {
	werr := contracts.AsError(cause)
	var head struct {
		ID      string `json:"id"`
		Session string `json:"session"`
	}
	_ = json.Unmarshal(msg.Data(), &head)
	log := w.log.With(slog.String("tool", t.name))
	if contracts.ValidID(head.ID) && contracts.ValidID(head.Session) {
		job := &contracts.Job{ID: head.ID, Session: head.Session, Tool: t.name}
		log.Info("malformed job refused", slog.String("job", head.ID), slog.String("error", werr.Message))
		w.finish(log, msg, job, attempt, 0, contracts.StatusFailed, nil, werr)
		return
	}
	log.Warn("unreadable job moved to the DLQ", slog.String("error", werr.Message))
	if err := w.retry(msg, func(ctx context.Context) error { return w.publishDLQ(ctx, t.name, msg.Data(), nil, attempt, werr) }); err != nil {
		_ = msg.NakWithDelay(time.Second)
		return
	}
	_ = msg.TermWithReason(string(contracts.CodeInvalidInput))
}
