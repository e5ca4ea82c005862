package worker

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// Observer is told what the worker does, for metrics. The worker names no
// metrics library: package metrics implements Observer with Prometheus,
// and a nil Config.Observer costs the hot path one nil check.
//
// The worker calls Tool once for each consumer it starts (a tool, and the
// tool's twin for each named tenant) and keeps the ToolObserver it returns,
// so a job's figures go to series the observer looked up once, not per
// job. Lag is called from one loop of the worker, every
// Config.LagInterval.
type Observer interface {
	Tool(tool, tenant string) ToolObserver
	Lag(lags []ConsumerLag)
}

// DLQObserver is an Observer that is also told the size of the
// dead-letter stream, read in the same loop as Lag, every
// Config.LagInterval (one stream-info request).
type DLQObserver interface {
	Observer
	DLQ(size DLQSize)
}

// QueueExpiryObserver is an Observer that is also told when this worker's
// queue sweep moved to the DLQ a job that no worker served within its
// tool's queue-time limit (Config.MaxQueueTime): a dead letter with no
// delivery, so no ToolObserver sees it. Only the tenant is given: the
// tool of such a job is any name a submitter chose, not a bounded label.
type QueueExpiryObserver interface {
	Observer
	QueueExpired(tenant string)
}

// DLQSize is the dead-letter stream's content as the worker last read it:
// the messages on each tool's dead-letter subject (<prefix>.dlq.<tool>)
// and the stream's bytes. It is the whole stream, every worker's dead
// letters, not this worker's alone.
type DLQSize struct {
	Messages map[string]uint64 // by tool
	Bytes    uint64
}

// ToolObserver receives the figures of one tool's jobs of one tenant. Its
// methods are called from the jobs' goroutines at once and must be safe
// for that; they must not block.
type ToolObserver interface {
	// Started is called when a delivery of a job is taken, with its
	// attempt (1-based) and how long its message waited in the stream
	// (from the server's timestamp of the message; for a redelivery that
	// includes the retry delay).
	Started(attempt int, queueWait time.Duration)
	// Ended is called once for every Started, with what the delivery came
	// to and how long it took.
	Ended(outcome Outcome, took time.Duration)
	// DeadLettered is called when this worker moved to the DLQ a job whose
	// own worker was lost during its last attempt (JetStream's
	// MAX_DELIVERIES advisory): a dead letter with no delivery of its own.
	DeadLettered()
}

// Outcome is what one delivery of a job came to.
type Outcome uint8

// Outcomes of a delivery. Completed, Failed, Cancelled, Denied, Parked and
// DeadLettered end the job or its step; Retried hands it back for a later
// attempt (a retryable error); Requeued hands it back without costing it
// an attempt of its own doing (shutdown, a bus outage); Answered is a
// redelivery of a job that had already ended, answered from its event.
const (
	OutcomeAnswered Outcome = iota
	OutcomeCompleted
	OutcomeFailed
	OutcomeCancelled
	OutcomeDenied
	OutcomeParked
	OutcomeDeadLettered
	OutcomeRetried
	OutcomeRequeued
	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	"answered", "completed", "failed", "cancelled", "denied", "parked", "dead_lettered", "retried", "requeued",
}

// String is the outcome's label value.
func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "unknown"
}

// Outcomes lists every outcome, for an observer that makes its series up
// front.
func Outcomes() []Outcome {
	out := make([]Outcome, numOutcomes)
	for i := range out {
		out[i] = Outcome(i) //nolint:gosec // G115: below numOutcomes
	}
	return out
}

// ConsumerLag is one consumer's backlog: the jobs of a tool and tenant not
// yet delivered (Pending) and delivered but not yet acknowledged
// (AckPending). Their sum is the figure to scale workers on.
type ConsumerLag struct {
	Tool, Tenant        string
	Pending, AckPending uint64
}

// outcomeOf maps the status a job was finished with onto its outcome.
func outcomeOf(status string) Outcome {
	switch status {
	case "completed":
		return OutcomeCompleted
	case "cancelled":
		return OutcomeCancelled
	case "denied":
		return OutcomeDenied
	default:
		return OutcomeFailed
	}
}

// observeStart tells t's observer a delivery was taken.
func (t *tool) observeStart(md *jetstream.MsgMetadata, now time.Time) {
	if t.obs == nil {
		return
	}
	t.obs.Started(int(md.NumDelivered), max(now.Sub(md.Timestamp), 0)) //nolint:gosec // G115: at most the consumer's MaxDeliver
}

func (t *tool) observeEnd(out Outcome, start time.Time) {
	if t.obs != nil {
		t.obs.Ended(out, time.Since(start))
	}
}

// sampleLag reports every consumer's backlog to the observer, every
// LagInterval, with one consumer listing per jobs stream served (the
// default tenant's and each named tenant's).
func (w *Worker) sampleLag() {
	defer w.loops.Done()
	tick := time.NewTicker(w.cfg.LagInterval)
	defer tick.Stop()
	streams := map[string]jetstream.Stream{"": w.jobs}
	dlqObs, _ := w.cfg.Observer.(DLQObserver)
	for {
		w.cfg.Observer.Lag(w.lags(streams))
		if dlqObs != nil {
			if size, ok := w.dlqSize(); ok {
				dlqObs.DLQ(size)
			}
		}
		select {
		case <-w.runCtx.Done():
			return
		case <-tick.C:
		}
	}
}

// dlqSize reads the dead-letter stream's messages per subject and its
// bytes; false when the stream cannot be read this round (the observer
// keeps its last figure).
func (w *Worker) dlqSize() (DLQSize, bool) {
	ctx, cancel := context.WithTimeout(w.runCtx, 5*time.Second)
	defer cancel()
	s, err := w.js.Stream(ctx, w.cfg.Subjects.DLQStream())
	if err == nil {
		var info *jetstream.StreamInfo
		if info, err = s.Info(ctx, jetstream.WithSubjectFilter(w.cfg.Subjects.DLQs())); err == nil {
			prefix := w.cfg.Subjects.DLQ("")
			size := DLQSize{Messages: make(map[string]uint64, len(info.State.Subjects)), Bytes: info.State.Bytes}
			for subj, n := range info.State.Subjects {
				if tool, ok := strings.CutPrefix(subj, prefix); ok && tool != "" {
					size.Messages[tool] += n
				}
			}
			return size, true
		}
	}
	w.log.Debug("dlq size: stream unreadable", slog.Any("err", err))
	return DLQSize{}, false
}

// lags lists the consumers of each served jobs stream and keeps those of
// this worker's tools. A stream it cannot read this round is left out.
func (w *Worker) lags(streams map[string]jetstream.Stream) []ConsumerLag {
	byConsumer := make(map[string]string, len(w.tools))
	for name := range w.tools {
		for _, p := range contracts.Priorities {
			for lane := range contracts.SessionLanes {
				byConsumer[w.cfg.Subjects.ConsumerNameLane(name, p, lane)] = name
			}
		}
	}
	tenants := []string{""}
	w.tenantMu.Lock()
	for tenant := range w.twins {
		tenants = append(tenants, tenant)
	}
	w.tenantMu.Unlock()
	var out []ConsumerLag
	for _, tenant := range tenants {
		ctx, cancel := context.WithTimeout(w.runCtx, 5*time.Second)
		out = w.streamLags(ctx, streams, tenant, byConsumer, out)
		cancel()
	}
	for tenant := range streams {
		if !w.servedTenant(tenant) {
			delete(streams, tenant) // removed: its stream may come back anew
		}
	}
	return out
}

func (w *Worker) streamLags(ctx context.Context, streams map[string]jetstream.Stream, tenant string,
	byConsumer map[string]string, out []ConsumerLag,
) []ConsumerLag {
	s, ok := streams[tenant]
	if !ok {
		var err error
		if s, err = w.js.Stream(ctx, w.cfg.Subjects.TenantJobsStream(tenant)); err != nil {
			w.log.Debug("lag: stream unreadable", slog.String("tenant", tenant), slog.Any("err", err))
			return out
		}
		streams[tenant] = s
	}
	// One figure a tool: the sum over its levels' (and lanes') consumers.
	at := map[string]int{}
	l := s.ListConsumers(ctx)
	for info := range l.Info() {
		name, ok := byConsumer[info.Name]
		if !ok {
			continue
		}
		i, seen := at[name]
		if !seen {
			i = len(out)
			at[name] = i
			out = append(out, ConsumerLag{Tool: name, Tenant: tenant})
		}
		out[i].Pending += info.NumPending
		out[i].AckPending += uint64(info.NumAckPending) //nolint:gosec // G115: a count, never negative
	}
	if err := l.Err(); err != nil {
		w.log.Debug("lag: consumers unreadable", slog.String("tenant", tenant), slog.Any("err", err))
	}
	return out
}

// consumerOf returns the consumer of toolName for tenant, nil when this
// worker has none.
func (w *Worker) consumerOf(toolName, tenant string) *tool {
	if tenant == "" {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.tools[toolName]
	}
	w.tenantMu.Lock()
	defer w.tenantMu.Unlock()
	for _, t := range w.twins[tenant] {
		if t.name == toolName {
			return t
		}
	}
	return nil
}

// servedTenant reports whether tenant ("" the default one) is served now.
func (w *Worker) servedTenant(tenant string) bool {
	if tenant == "" {
		return true
	}
	w.tenantMu.Lock()
	defer w.tenantMu.Unlock()
	_, ok := w.twins[tenant]
	return ok
}
