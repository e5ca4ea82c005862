package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

// deadLetter stores the job in the DLQ, then publishes its failed event, then
// removes it from the queue.
func (w *Worker) deadLetter(log *slog.Logger, msg jetstream.Msg, t *tool, job *contracts.Job, attempts int, lastSeq uint64, werr *contracts.Error) Outcome {
	werr = &contracts.Error{Code: werr.Code, Message: werr.Message, Details: werr.Details}
	if err := w.retry(msg, func(ctx context.Context) error { return w.publishDLQ(ctx, t.name, msg.Data(), job, attempts, werr) }); err != nil {
		log.Error("dead letter not stored; handing the job back", slog.Any("err", err))
		_ = msg.NakWithDelay(time.Second)
		return OutcomeRequeued
	}
	log.Warn("job exhausted its attempts; moved to the DLQ", slog.Int("attempts", attempts), slog.String("error", werr.Message))
	if o := w.finish(log, msg, job, attempts, lastSeq, contracts.StatusFailed, nil, werr); o != OutcomeFailed {
		return o
	}
	return OutcomeDeadLettered
}

func (w *Worker) publishDLQ(ctx context.Context, toolName string, raw []byte, job *contracts.Job, attempts int, werr *contracts.Error) error {
	dl := contracts.DeadLetter{
		Job: json.RawMessage(raw), Tool: toolName, Attempts: attempts,
		Error: werr, Worker: w.cfg.Name, Time: time.Now().UTC(),
	}
	if !json.Valid(raw) {
		dl.Job, _ = json.Marshal(string(raw))
	}
	msgID := ""
	if job != nil {
		dl.JobID, dl.Session, dl.Tenant = job.ID, job.Session, job.Tenant
		if job.Priority != contracts.PriorityNormal {
			dl.Priority = job.Priority
		}
		msgID = contracts.TenantKey(job.Tenant, job.ID) + "/dlq"
	}
	data, err := json.Marshal(dl)
	if err != nil {
		return err
	}
	if limit := w.dlqLimit(); len(data) > limit {
		// Escaping a body that is not JSON can make it six times larger:
		// keep its first bytes, its size and its hash instead.
		dl.JobTruncated, dl.JobSize = true, len(raw)
		sum := sha256.Sum256(raw)
		dl.JobSHA256 = hex.EncodeToString(sum[:])
		dl.Job, _ = json.Marshal(string(raw[:min(len(raw), dlqExcerpt)]))
		if len(dl.Error.Message) > dlqExcerpt {
			e := *dl.Error
			e.Message, e.Details = strings.ToValidUTF8(e.Message[:dlqExcerpt], "")+"…", nil
			dl.Error = &e
		}
		if data, err = json.Marshal(dl); err != nil {
			return err
		}
	}
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	_, err = w.js.Publish(ctx, w.cfg.Subjects.DLQ(toolName), data, opts...)
	return err
}

// dlqExcerpt is how much of an oversized job message (and of its error
// message) a dead letter keeps: at most 6 × 16 KiB once escaped.
const dlqExcerpt = 16 << 10

// dlqLimit is the largest dead-letter record stored whole: the server's
// max payload less room for headers.
func (w *Worker) dlqLimit() int {
	return max(int(w.nc.MaxPayload())-(8<<10), 8*dlqExcerpt)
}

// reject handles a job message that cannot be run: a failed event with
// invalid_input when the message names a valid job and session, the DLQ when
// it does not (there is nobody to tell); never redelivered.
func (w *Worker) reject(t *tool, msg jetstream.Msg, attempt int, cause error) Outcome {
	werr := contracts.AsError(cause)
	var head struct {
		ID      string `json:"id"`
		Session string `json:"session"`
	}
	_ = json.Unmarshal(msg.Data(), &head)
	log := w.log.With(slog.String("tool", t.name))
	tenant, tenantOK := w.cfg.Subjects.TenantOf(msg.Subject())
	if tenantOK && contracts.ValidID(head.ID) && contracts.ValidID(head.Session) {
		job := &contracts.Job{ID: head.ID, Session: head.Session, Tool: t.name, Tenant: tenant}
		log.Info("malformed job refused", slog.String("job", head.ID), slog.String("error", werr.Message))
		return w.finish(log, msg, job, attempt, 0, contracts.StatusFailed, nil, werr)
	}
	if err := w.retry(msg, func(ctx context.Context) error { return w.publishDLQ(ctx, t.name, msg.Data(), nil, attempt, werr) }); err != nil {
		log.Error("unreadable job: dead letter not stored; handing it back", slog.Any("err", err))
		_ = msg.NakWithDelay(time.Second)
		return OutcomeRequeued
	}
	_ = msg.TermWithReason(string(contracts.CodeInvalidInput))
	log.Warn("unreadable job moved to the DLQ", slog.String("error", werr.Message))
	return OutcomeDeadLettered
}

// refuseFired moves a job message the server fired from a message schedule
// (the Nats-Scheduler header) to the DLQ, writing no event: toolq's
// schedules fire into the schedules stream and reach the jobs through the
// scheduler's relay as fresh messages, so a fired copy in a jobs stream is a
// schedule someone slipped into a jobs stream made before schedules had a
// stream of their own (such a stream keeps message schedules on). Whatever
// job and session its body names, it is not theirs to answer.
func (w *Worker) refuseFired(t *tool, msg jetstream.Msg, attempt int) Outcome {
	from := msg.Headers().Get(headerScheduler)
	werr := contracts.Errorf(contracts.CodeInvalidInput, "job message fired by the message schedule %q: scheduled jobs come from toolq's scheduler only", clipText(from, 128))
	if err := w.retry(msg, func(ctx context.Context) error { return w.publishDLQ(ctx, t.name, msg.Data(), nil, attempt, werr) }); err != nil {
		w.log.Error("fired job: dead letter not stored; handing it back", slog.String("tool", t.name), slog.Any("err", err))
		_ = msg.NakWithDelay(time.Second)
		return OutcomeRequeued
	}
	_ = msg.TermWithReason(string(contracts.CodeInvalidInput))
	w.log.Warn("job fired by a message schedule refused and moved to the DLQ", slog.String("tool", t.name), slog.String("schedule", clipText(from, 128)))
	return OutcomeDeadLettered
}

// clipText cuts s to at most n bytes for a log line or an error.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
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
	tenant, ok := w.streamTenant(adv.Stream)
	if !ok {
		return // not a jobs stream this worker serves
	}
	stream, err := w.js.Stream(ctx, adv.Stream)
	if err != nil {
		w.log.Warn("max deliveries: stream unreadable", slog.String("stream", adv.Stream), slog.Any("err", err))
		return
	}
	raw, err := stream.GetMsg(ctx, adv.StreamSeq)
	if err != nil {
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			w.log.Warn("max deliveries: job unreadable", slog.Uint64("seq", adv.StreamSeq), slog.Any("err", err))
		}
		return
	}
	toolName, prio, lane := w.cfg.Subjects.TenantJobLaneOf(tenant, raw.Subject)
	if toolName == "" {
		return // not a job of ours (e.g. a schedule)
	}
	if err := w.verifyExhausted(ctx, adv, toolName, prio, lane); err != nil {
		w.log.Warn("max deliveries advisory not acted on", slog.String("stream", adv.Stream),
			slog.Uint64("seq", adv.StreamSeq), slog.String("reason", err.Error()))
		return
	}
	werr := contracts.Errorf(contracts.CodeInternalError,
		"attempts exhausted: the worker running attempt %d stopped without an answer", adv.Deliveries)
	job, derr := contracts.DecodeJob(raw.Data)
	if derr != nil {
		job = nil
	} else {
		job.Priority = prio
	}
	if err := w.publishDLQ(ctx, toolName, raw.Data, job, int(adv.Deliveries), werr); err != nil { //nolint:gosec // G115: at most the consumer's MaxDeliver, an int
		w.log.Warn("max deliveries: DLQ write failed", slog.Any("err", err))
		return
	}
	if job != nil {
		job.Tenant = tenant
		ev, seq, err := w.events.LastIn(ctx, tenant, job.Session, job.ID)
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
			if err := w.notifyParent(ctx, job, ev, raw.Header.Get(bus.HeaderTraceParent)); err != nil {
				w.log.Warn("max deliveries: parent run not told", slog.Any("err", err))
				return
			}
		}
	}
	if err := stream.DeleteMsg(ctx, adv.StreamSeq); err != nil {
		w.log.Debug("max deliveries: delete", slog.Any("err", err))
		return // another worker moved it
	}
	if t := w.consumerOf(toolName, tenant); t != nil && t.obs != nil {
		t.obs.DeadLettered()
	}
	w.log.Warn("job exhausted its attempts after a lost worker; moved to the DLQ",
		slog.String("tool", toolName), slog.Uint64("seq", adv.StreamSeq))
}

// streamTenant returns the tenant whose jobs stream is named stream: "" for
// the jobs stream, a named tenant this worker serves for a tenant's.
func (w *Worker) streamTenant(stream string) (string, bool) {
	if stream == w.cfg.Subjects.JobsStream() {
		return "", true
	}
	if !w.cfg.Tenants {
		return "", false
	}
	w.tenantMu.Lock()
	defer w.tenantMu.Unlock()
	for tenant := range w.twins {
		if w.cfg.Subjects.TenantJobsStream(tenant) == stream {
			return tenant, true
		}
	}
	return "", false
}

// verifyExhausted checks an advisory against the server before a job is
// moved to the DLQ: anyone who may publish on $JS.EVENT can forge one. The
// advisory must name the consumer of the tool's level of the job (its lane's, with
// lanes apart), claim at least its
// MaxDeliver, and the consumer must already have delivered the message: a
// forged advisory for a queued job, the one that would delete a job nobody
// ran, is refused by the last check.
func (w *Worker) verifyExhausted(ctx context.Context, adv maxDeliveriesAdvisory, toolName string, prio contracts.Priority, lane int) error {
	if adv.Consumer != w.cfg.Subjects.ConsumerNameAt(toolName, prio) && adv.Consumer != w.cfg.Subjects.ConsumerNameLane(toolName, prio, lane) {
		return fmt.Errorf("consumer %q is not the consumer of %s", adv.Consumer, toolName)
	}
	cons, err := w.js.Consumer(ctx, adv.Stream, adv.Consumer)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("consumer info: %w", err)
	}
	if maxDeliver := info.Config.MaxDeliver; maxDeliver > 0 && adv.Deliveries < uint64(maxDeliver) {
		return fmt.Errorf("%d deliveries is below the consumer's max of %d", adv.Deliveries, maxDeliver)
	}
	if adv.StreamSeq > info.Delivered.Stream {
		return fmt.Errorf("the consumer never delivered message %d (delivered up to %d)", adv.StreamSeq, info.Delivered.Stream)
	}
	return nil
}
