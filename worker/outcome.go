package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

// finish publishes the job's terminal event and then acknowledges the
// message (Term for failures, so it is never redelivered). If the event
// cannot be stored the message is handed back for a later attempt. It
// returns what the delivery came to.
func (w *Worker) finish(log *slog.Logger, msg jetstream.Msg, job *contracts.Job, attempt int, lastSeq uint64,
	status contracts.Status, result json.RawMessage, werr *contracts.Error,
) Outcome {
	ev := contracts.NewEvent(w.source, job, status, 1, time.Now())
	ev.Data.Attempt = attempt
	ev.Data.Result = result
	ev.Data.Error = werr
	err := w.retry(msg, func(ctx context.Context) error {
		_, err := w.events.Publish(ctx, ev, lastSeq, traceOf(msg))
		return err
	})
	if errors.Is(err, nats.ErrMaxPayload) {
		// The outcome itself is too large to store: running the job again
		// would make it again, so it fails for good, without its payload.
		status, werr = contracts.StatusFailed, contracts.Errorf(contracts.CodeOutputLimitExceeded,
			"the job's %s event exceeds the server's max payload", status)
		ev = contracts.NewEvent(w.source, job, status, 1, time.Now())
		ev.Data.Attempt, ev.Data.Error = attempt, werr
		err = w.retry(msg, func(ctx context.Context) error {
			_, err := w.events.Publish(ctx, ev, lastSeq, traceOf(msg))
			return err
		})
	}
	if errors.Is(err, bus.ErrConflict) {
		if o, ended := w.endedElsewhere(log, msg, job); ended {
			return o
		}
		// Another delivery of the same job wrote a non-terminal event: take
		// the subject's current tail and try once more.
		err = w.retry(msg, func(ctx context.Context) error {
			_, seq, err := w.events.LastIn(ctx, job.Tenant, job.Session, job.ID)
			if err != nil {
				return err
			}
			_, err = w.events.Publish(ctx, ev, seq, traceOf(msg))
			return err
		})
		if errors.Is(err, bus.ErrConflict) {
			if o, ended := w.endedElsewhere(log, msg, job); ended {
				return o
			}
		}
	}
	if err != nil {
		log.Warn("terminal event not stored; handing the job back", slog.Any("err", err))
		_ = msg.NakWithDelay(time.Second)
		return OutcomeRequeued
	}
	if err := w.retry(msg, func(ctx context.Context) error { return w.notifyParent(ctx, job, ev, traceOf(msg)) }); err != nil {
		log.Warn("parent run not told; handing the job back", slog.Any("err", err))
		_ = msg.NakWithDelay(time.Second)
		return OutcomeRequeued
	}
	if status == contracts.StatusFailed {
		_ = msg.TermWithReason(string(werr.Code))
		return OutcomeFailed
	}
	_ = msg.Ack()
	return outcomeOf(string(status))
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
		if err == nil || errors.Is(err, bus.ErrConflict) || errors.Is(err, nats.ErrMaxPayload) || time.Now().After(deadline) {
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
func (w *Worker) ackEnded(log *slog.Logger, msg jetstream.Msg, job *contracts.Job, ev *contracts.Event) Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.notifyParent(ctx, job, ev, traceOf(msg)); err != nil {
		log.Warn("parent run not told; handing the job back", slog.Any("err", err))
		_ = msg.NakWithDelay(time.Second)
		return OutcomeRequeued
	}
	_ = msg.Ack()
	return OutcomeAnswered
}

// notifyParent reports the end of a nested call to the run that made it:
// a job of the run's continuation tool (Job.Parent) with a ToolResult as
// input that echoes the call's token, on the job's own tenant's subject
// (so it lands in that tenant's jobs stream and can reach only that
// tenant's runs), deduplicated by a deterministic id.
func (w *Worker) notifyParent(ctx context.Context, job *contracts.Job, ev *contracts.Event, traceparent string) error {
	if job.Parent == nil || checkParent(job) != nil {
		return nil
	}
	tr := contracts.ToolResult{
		RunID: job.Parent.RunID, CallID: job.Parent.CallID, JobID: job.ID,
		Status: ev.Data.Status, Result: ev.Data.Result, Error: ev.Data.Error,
		Token: job.Parent.Token,
	}
	input, err := json.Marshal(tr)
	if err != nil {
		return err
	}
	nj := contracts.Job{
		ID: contracts.ToolResultJobID(job.ID), Tool: job.Parent.Continuation(), Session: job.Session,
		Input: input, CreatedAt: time.Now().UTC(),
	}
	data, err := json.Marshal(nj)
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: w.cfg.Subjects.TenantJob(job.Tenant, nj.Tool), Data: data}
	if traceparent != "" {
		// The report is in the trace of the call: a child of the span the
		// call was submitted under.
		msg.Header = nats.Header{bus.HeaderTraceParent: []string{traceparent}}
	}
	_, err = w.js.PublishMsg(ctx, msg, jetstream.WithMsgID(contracts.DedupID(&nj)))
	return err
}

// park publishes a parked event and acknowledges the message: the job's
// current step is over, the job is not.
func (w *Worker) park(log *slog.Logger, msg jetstream.Msg, job *contracts.Job, attempt int, lastSeq uint64, park *ParkError, result json.RawMessage) Outcome {
	ev := contracts.NewEvent(w.source, job, park.Status, park.N, time.Now())
	ev.Data.Attempt = attempt
	ev.Data.Result = result
	var seq uint64
	err := w.retry(msg, func(ctx context.Context) error {
		var err error
		seq, err = w.events.Publish(ctx, ev, lastSeq, traceOf(msg))
		return err
	})
	if errors.Is(err, bus.ErrConflict) {
		if o, ended := w.endedElsewhere(log, msg, job); ended {
			return o
		}
	}
	if err != nil {
		log.Warn("parked event not stored; handing the job back", slog.Any("err", err))
		_ = msg.NakWithDelay(time.Second)
		return OutcomeRequeued
	}
	w.lastEvents.note(job, seq)
	_ = msg.Ack()
	return OutcomeParked
}

// Emit writes the n-th event of status for a job other than the one being
// handled (a parked job being continued): after the job's current last
// event, and never after a terminal one. ref needs ID, Session and Tool;
// its Tenant ("" for the default one) says whose events they are.
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
	if ref.Tenant != "" {
		if err := contracts.ValidateID("tenant", ref.Tenant); err != nil {
			return err
		}
	}
	// The event goes after the job's last one, and only after a non-terminal
	// one. When this worker wrote that last event (it parked the job), its
	// sequence is known and the first try writes without reading it back;
	// the write expects that sequence either way, so a guess that is out of
	// date only costs a conflict and the read.
	known, guessed := w.lastEvents.take(ref)
	for range 5 {
		job := *ref
		var (
			last *contracts.Event
			seq  uint64
		)
		if guessed {
			seq = known.seq
			if job.Parent == nil {
				job.Parent = known.parent
			}
		} else {
			var err error
			last, seq, err = w.events.LastIn(ctx, ref.Tenant, ref.Session, ref.ID)
			if err != nil {
				return err
			}
			if last != nil && last.Data.Status.Terminal() {
				return fmt.Errorf("%w: %s", ErrJobEnded, last.Data.Status)
			}
			// A parked nested call keeps its parent run: its events say
			// so, and its end is reported to the run.
			if job.Parent == nil && last != nil {
				job.Parent = last.Data.Parent
			}
		}
		guessed = false
		ev := contracts.NewEvent(w.source, &job, status, max(n, 1), time.Now())
		ev.Data.Result = result
		ev.Data.Error = werr
		next, err := w.events.Publish(ctx, ev, seq, traceParent(ctx))
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		if err != nil {
			return err
		}
		if !status.Terminal() {
			w.lastEvents.note(&job, next)
			return nil
		}
		return w.notifyParent(ctx, &job, ev, traceParent(ctx))
	}
	return fmt.Errorf("worker: emit %s/%s: event subject kept moving", ref.ID, status)
}

// endedElsewhere reports (and acks) when the job's event subject already ends
// in a terminal event written by someone else (a cancel, another delivery),
// with what the delivery came to.
func (w *Worker) endedElsewhere(log *slog.Logger, msg jetstream.Msg, job *contracts.Job) (Outcome, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, _, err := w.events.LastIn(ctx, job.Tenant, job.Session, job.ID)
	if err != nil || ev == nil || !ev.Data.Status.Terminal() {
		return 0, false
	}
	log.Debug("job already ended elsewhere", slog.String("status", string(ev.Data.Status)))
	return w.ackEnded(log, msg, job, ev), true
}
