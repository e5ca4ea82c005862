package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

// Causes of a running job's context ending early.
var (
	errJobCancelled = errors.New("job cancelled")
	errShutdown     = errors.New("worker shutting down")
)

// process runs one delivery of a job from start to ack.
func (w *Worker) process(t *tool, prio contracts.Priority, msg jetstream.Msg, h *slotHold) {
	md, err := msg.Metadata()
	if err != nil {
		w.log.Error("job without metadata", slog.Any("err", err))
		_ = msg.Term()
		return
	}
	attempt := int(md.NumDelivered) //nolint:gosec // G115: at most the consumer's MaxDeliver, an int
	start := time.Now()
	t.observeStart(md, start)
	out := OutcomeAnswered
	var code contracts.ErrorCode // the job's error code, for its span
	var span Span                // nil without a Tracer
	defer func() {
		t.observeEnd(out, start)
		if span != nil {
			span.End(out.String(), code)
		}
	}()
	if msg.Headers().Get(headerScheduler) != "" {
		out = w.refuseFired(t, msg, attempt)
		return
	}
	job, err := contracts.DecodeJob(msg.Data())
	if err == nil {
		// The tenant comes from the subject, never from the body.
		var ok bool
		if job.Tenant, ok = w.cfg.Subjects.TenantOf(msg.Subject()); !ok {
			err = contracts.Errorf(contracts.CodeInvalidInput, "job subject %q names no valid tenant", msg.Subject())
		} else {
			err = checkParent(job)
		}
		job.Priority = prio
	}
	if err == nil && job.Tool != t.name {
		err = contracts.Errorf(contracts.CodeInvalidInput, "job tool %q does not match subject tool %q", job.Tool, t.name)
	}
	if err == nil {
		err = checkMsgID(msg, job)
	}
	if w.cfg.Tracer != nil {
		// Started once the job is read, with all its attributes at once;
		// its start is the delivery's.
		span = w.startJobSpan(t, msg, attempt, md, start, job, err)
	}
	if err != nil {
		code = contracts.AsError(err).Code
		out = w.reject(t, msg, attempt, err)
		return
	}
	log := w.log.With(slog.String("job", job.ID), slog.String("tool", t.name), slog.Int("attempt", attempt))
	if job.Tenant != "" {
		log = log.With(slog.String("tenant", job.Tenant))
	}

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
			ev, seq, err = w.events.LastIn(ctx, job.Tenant, job.Session, job.ID)
			return err
		})
		if err != nil && ev == nil && seq == 0 {
			log.Warn("redelivered job: result store unreadable; retrying later", slog.Any("err", err))
			_ = msg.NakWithDelay(time.Second)
			out = OutcomeRequeued
			return
		}
		if ev != nil && ev.Data.Status.Terminal() {
			log.Debug("redelivered job already ended; answering from its event", slog.String("status", string(ev.Data.Status)))
			out = w.ackEnded(log, msg, job, ev)
			return
		}
		lastSeq = seq
	}
	// Cancels and in-flight jobs are per tenant and session: only a cancel
	// that names the job's session stops it.
	key := contracts.CancelKey(job.Tenant, job.Session, job.ID)
	if w.isCancelled(key) {
		code = contracts.CodeCancelled
		out = w.finish(log, msg, job, attempt, lastSeq, contracts.StatusCancelled, nil, contracts.Errorf(contracts.CodeCancelled, "job was cancelled before it started"))
		return
	}
	if job.Tenant != "" && t.cfg.DefaultTenantOnly {
		code = contracts.CodeInvalidInput
		out = w.finish(log, msg, job, attempt, lastSeq, contracts.StatusFailed, nil, contracts.Errorf(contracts.CodeInvalidInput, "tool %s does not serve tenants", t.name))
		return
	}
	maxAttempts := t.cfg.Retry.MaxAttempts
	if job.MaxAttempts > 0 && job.MaxAttempts < maxAttempts {
		maxAttempts = job.MaxAttempts
	}
	if attempt > maxAttempts {
		code = contracts.CodeInternalError
		out = w.deadLetter(log, msg, t, job, attempt-1, lastSeq,
			contracts.Errorf(contracts.CodeInternalError, "attempts exhausted: the worker running attempt %d stopped without an answer", attempt-1))
		return
	}

	ctx, cancel := context.WithCancelCause(w.runCtx)
	switch tp := msg.Headers().Get(bus.HeaderTraceParent); {
	case span != nil:
		// What the handler submits is a child of this delivery's span.
		ctx = context.WithValue(ctx, traceKey{}, span)
	case tp != "":
		ctx = withTraceParent(ctx, tp)
	}
	ctx = context.WithValue(ctx, attemptKey{}, attempt)
	ctx = context.WithValue(ctx, headersKey{}, msg.Headers())
	w.mu.Lock()
	w.inflight[key] = &inflight{msg: msg, cancel: cancel, started: time.Now(), ackWait: t.cfg.AckWait}
	cancelled := w.cancelledLocked(key)
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.inflight, key)
		w.mu.Unlock()
		cancel(nil)
	}()
	if cancelled {
		cancel(errJobCancelled)
	}
	if lim := w.rates.of(job.Tenant, job.Tool); lim != nil {
		if o, ok := w.rateSlot(ctx, log, t, msg, job, attempt, &lastSeq, h, lim); !ok {
			out = o
			return
		}
	}
	for _, lim := range w.jobRateLimits(log, t, job) {
		if o, ok := w.rateSlot(ctx, log, t, msg, job, attempt, &lastSeq, h, lim); !ok {
			out = o
			return
		}
	}
	if job.Concurrency != nil {
		lease, o, ok := w.concurrencySlot(ctx, log, t, msg, job, attempt, &lastSeq, h)
		if !ok {
			out = o
			return
		}
		defer lease.release()
	}
	// The attempt's timeout starts now, not while it waited for a slot.
	ctx, cancelTimeout := context.WithTimeout(ctx, job.Timeout(t.cfg.Timeout))
	defer cancelTimeout()

	if job.Progress {
		ev := contracts.NewEvent(w.source, job, contracts.StatusRunning, attempt, time.Now())
		ev.Data.Attempt = attempt
		seq, err := w.events.Publish(ctx, ev, lastSeq, traceParent(ctx))
		switch {
		case errors.Is(err, bus.ErrConflict):
			if o, ended := w.endedElsewhere(log, msg, job); ended {
				out = o
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
		out = OutcomeRequeued
		return
	case errors.Is(cause, errJobCancelled):
		code = contracts.CodeCancelled
		out = w.finish(log, msg, job, attempt, lastSeq, contracts.StatusCancelled, nil, contracts.Errorf(contracts.CodeCancelled, "job was cancelled while running"))
		return
	}
	var park *ParkError
	if errors.As(herr, &park) {
		if herr = invalidPark(park, result); herr == nil {
			out = w.park(log, msg, job, attempt, lastSeq, park, result)
			return
		}
	}
	var denied *DeniedError
	if errors.As(herr, &denied) {
		if !json.Valid(result) {
			result = nil
		}
		log.Info("job denied", slog.String("reason", denied.Reason))
		code = contracts.CodeDenied
		out = w.finish(log, msg, job, attempt, lastSeq, contracts.StatusDenied, result, contracts.Errorf(contracts.CodeDenied, "%s", denied.Reason))
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
			herr = Permanent(contracts.Errorf(contracts.CodeInternalError, "handler returned a result that is not valid JSON"))
		case !utf8.Valid(result):
			herr = Permanent(contracts.Errorf(contracts.CodeInternalError, "handler returned a result that is not valid UTF-8"))
		default:
			out = w.finish(log, msg, job, attempt, lastSeq, contracts.StatusCompleted, result, nil)
			return
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && !errors.Is(herr, contracts.ErrTimeout) {
		herr = &contracts.Error{Code: contracts.CodeTimeout, Message: fmt.Sprintf("attempt exceeded its timeout of %s", job.Timeout(t.cfg.Timeout)), Retryable: true}
	}
	werr, retry, delay := classify(herr)
	code = werr.Code
	if delay == 0 {
		delay = t.cfg.Retry.Delay(attempt)
	}
	switch {
	case !retry:
		log.Info("job failed permanently", slog.String("code", string(werr.Code)), slog.String("error", werr.Message))
		out = w.finish(log, msg, job, attempt, lastSeq, contracts.StatusFailed, nil, werr)
	case attempt >= maxAttempts:
		out = w.deadLetter(log, msg, t, job, attempt, lastSeq, werr)
	default:
		log.Info("job failed; retrying", slog.Duration("delay", delay), slog.String("error", werr.Message))
		_ = msg.NakWithDelay(delay)
		out = OutcomeRetried
	}
}

// headerScheduler is the header the server puts on a message it stored
// because a message schedule fired.
const headerScheduler = "Nats-Scheduler"

// checkParent refuses a tenant's job whose parent names a continuation
// other than code mode's: its end is reported, as a job the worker
// publishes, on the tenant's own subject of that tool, and a tenant's
// agents may not publish code_mode.result or exec.decide themselves. The
// report can resume only a run of the same tenant, and only with the
// pending call's token (code mode checks it).
func checkParent(job *contracts.Job) error {
	if job.Tenant != "" && job.Parent != nil && job.Parent.Continuation() != contracts.ToolCodeModeResult {
		return contracts.Errorf(contracts.CodeInvalidInput, "a tenant's job may report its end only to %s, not to parent.tool %q",
			contracts.ToolCodeModeResult, job.Parent.Tool)
	}
	return nil
}

// checkMsgID refuses a job message whose Nats-Msg-Id is not the job's
// dedup id: JetStream deduplicates by the header, so a copy of a job under
// another header would run the tool a second time.
func checkMsgID(msg jetstream.Msg, job *contracts.Job) error {
	got, want := msg.Headers().Get(jetstream.MsgIDHeader), contracts.DedupID(job)
	switch {
	case got == "":
		return contracts.Errorf(contracts.CodeInvalidInput, "job message has no Nats-Msg-Id header; it must be %q", want)
	case got != want:
		return contracts.Errorf(contracts.CodeInvalidInput, "job message has Nats-Msg-Id %q; it must be %q", got, want)
	}
	return nil
}

// invalidPark checks what a handler parked the job with. A park that
// cannot be published is the handler's bug: trying again would park it the
// same way, so it fails the job at once.
func invalidPark(park *ParkError, result json.RawMessage) error {
	switch {
	case !park.Status.Parked():
		return Permanent(contracts.Errorf(contracts.CodeInternalError,
			"handler parked the job with status %q, which does not park a job", park.Status))
	case !json.Valid(result):
		return Permanent(contracts.Errorf(contracts.CodeInternalError,
			"park result is invalid: the handler parked the job with a result that is not valid JSON"))
	}
	return nil
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
