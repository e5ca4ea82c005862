package worker

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

// The queue-time limit. A job for a tool that no worker serves would wait
// in its work-queue stream forever, its requester's Await with it. Every
// worker therefore sweeps the jobs streams it serves (the default tenant's
// and, with Tenants, each tenant's) for subjects whose tool has no live
// consumer, and dead-letters their jobs once they have waited longer than
// the tool's limit, with a failed event (runtime_unavailable). There is no
// central process: each worker sweeps, and the steps are idempotent (the
// DLQ record and the event are deduplicated and conditional, one delete
// wins), as for the MAX_DELIVERIES net.

// maxQueueTime is the queue-time limit of tool, 0 when it has none.
func (w *Worker) maxQueueTime(tool string) time.Duration {
	if d, ok := w.cfg.MaxQueueTimes[tool]; ok {
		return max(d, 0)
	}
	return max(w.cfg.MaxQueueTime, 0)
}

// sweepInterval is how often a worker sweeps: a quarter of the shortest
// limit, between 100 ms and one minute; 0 when no tool has a limit.
func (w *Worker) sweepInterval() time.Duration {
	shortest := max(w.cfg.MaxQueueTime, 0)
	for _, d := range w.cfg.MaxQueueTimes {
		if d > 0 && (shortest == 0 || d < shortest) {
			shortest = d
		}
	}
	if shortest == 0 {
		return 0
	}
	return min(max(shortest/4, 100*time.Millisecond), time.Minute)
}

// sweepUnserved runs the sweeps until the worker stops, each after the
// interval with up to a quarter of jitter, so the workers of a fleet do
// not sweep in step.
func (w *Worker) sweepUnserved(interval time.Duration) {
	defer w.loops.Done()
	for {
		jitter := time.Duration(rand.Int64N(int64(interval)/4 + 1)) //nolint:gosec // G404: spreading sweeps needs no secure randomness
		t := time.NewTimer(interval + jitter)
		select {
		case <-w.runCtx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		w.sweepStream(w.cfg.Subjects.JobsStream(), "")
		if w.cfg.Tenants {
			w.tenantMu.Lock()
			tenants := make([]string, 0, len(w.twins))
			for tenant := range w.twins {
				tenants = append(tenants, tenant)
			}
			w.tenantMu.Unlock()
			for _, tenant := range tenants {
				w.sweepStream(w.cfg.Subjects.TenantJobsStream(tenant), tenant)
			}
		}
	}
}

// maxSweptPerSubject bounds the jobs one sweep ends per subject.
const maxSweptPerSubject = 1000

// sweepStream ends the overdue jobs of the unserved tools of one jobs
// stream.
func (w *Worker) sweepStream(name, tenant string) {
	ctx, cancel := context.WithTimeout(w.runCtx, 30*time.Second)
	defer cancel()
	stream, err := w.js.Stream(ctx, name)
	if err != nil {
		w.log.Debug("queue sweep: stream", slog.String("stream", name), slog.Any("err", err))
		return
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(w.cfg.Subjects.TenantJobs(tenant)))
	if err != nil {
		w.log.Debug("queue sweep: stream info", slog.String("stream", name), slog.Any("err", err))
		return
	}
	for subject := range info.State.Subjects {
		tool, prio, lane := w.cfg.Subjects.TenantJobLaneOf(tenant, subject)
		limit := w.maxQueueTime(tool)
		if tool == "" || limit == 0 || w.served(ctx, name, tool, prio, lane, subject, limit) {
			continue
		}
		w.sweepSubject(ctx, stream, tenant, tool, subject, limit)
	}
}

// served reports whether a worker is on the consumer of subject, tool's
// level prio on lane: it has pull requests waiting, jobs in flight, or
// delivered one within limit (a loop that waits for a slot while other
// tenants' or levels' jobs fill them has no request out, but is served). A
// consumer with none of these, or none at all, has nobody taking its jobs.
// A lane's consumer is its own (lanes apart) or its level's, when that one
// filters the lane (lanes folded; a NormalOnly tool's does not). Answers it
// cannot read count as served.
func (w *Worker) served(ctx context.Context, stream, tool string, prio contracts.Priority, lane int, subject string, limit time.Duration) bool {
	cons, err := w.js.Consumer(ctx, stream, w.cfg.Subjects.ConsumerNameLane(tool, prio, lane))
	if lane > 0 && errors.Is(err, jetstream.ErrConsumerNotFound) {
		cons, err = w.js.Consumer(ctx, stream, w.cfg.Subjects.ConsumerNameAt(tool, prio))
		if err == nil && !slices.Contains(cons.CachedInfo().Config.FilterSubjects, subject) {
			return false
		}
	}
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return false
	}
	if err != nil {
		return true
	}
	ci := cons.CachedInfo()
	if last := ci.Delivered.Last; last != nil && time.Since(*last) < limit {
		return true
	}
	return ci.NumWaiting > 0 || ci.NumAckPending > 0
}

// sweepSubject dead-letters the jobs of subject, oldest first, that have
// waited longer than limit.
func (w *Worker) sweepSubject(ctx context.Context, stream jetstream.Stream, tenant, tool, subject string, limit time.Duration) {
	var seq uint64
	for range maxSweptPerSubject {
		raw, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgNotFound) {
				w.log.Debug("queue sweep: read", slog.String("subject", subject), slog.Any("err", err))
			}
			return
		}
		if time.Since(raw.Time) < limit {
			return // the rest are younger
		}
		seq = raw.Sequence + 1
		w.expire(ctx, stream, tenant, tool, raw, limit)
	}
}

// expire ends one overdue job: its DLQ record, its failed event (unless it
// already ended, say by a cancel), a report to its parent run, then the
// message's delete.
func (w *Worker) expire(ctx context.Context, stream jetstream.Stream, tenant, tool string, raw *jetstream.RawStreamMsg, limit time.Duration) {
	werr := contracts.Errorf(contracts.CodeRuntimeUnavailable, "no worker served tool %s within %s", tool, limit)
	job, derr := contracts.DecodeJob(raw.Data)
	if derr != nil || job.Tool != tool {
		job = nil
	}
	var ended *contracts.Event
	if job != nil {
		job.Tenant = tenant
		_, job.Priority = w.cfg.Subjects.TenantJobOf(tenant, raw.Subject)
		ev, seq, err := w.events.LastIn(ctx, tenant, job.Session, job.ID)
		if err != nil {
			w.log.Debug("queue sweep: last event", slog.Any("err", err))
			return
		}
		if ev != nil && ev.Data.Status.Terminal() {
			ended = ev
		} else {
			if err := w.publishDLQ(ctx, tool, raw.Data, job, 0, werr); err != nil {
				w.log.Warn("queue sweep: DLQ write failed", slog.Any("err", err))
				return
			}
			fe := contracts.NewEvent(w.source, job, contracts.StatusFailed, 1, time.Now())
			fe.Data.Error = werr
			if _, err := w.events.Publish(ctx, fe, seq, ""); err != nil {
				w.log.Debug("queue sweep: failed event", slog.Any("err", err))
				return // someone else wrote the job's end; the next sweep looks again
			}
			ended = fe
			w.countExpired(tenant) // once: only one sweep's failed event is stored
		}
		if err := w.notifyParent(ctx, job, ended, raw.Header.Get(bus.HeaderTraceParent)); err != nil {
			w.log.Warn("queue sweep: parent run not told", slog.Any("err", err))
			return
		}
	} else if err := w.publishDLQ(ctx, tool, raw.Data, nil, 0, werr); err != nil {
		w.log.Warn("queue sweep: DLQ write failed", slog.Any("err", err))
		return
	}
	if err := stream.DeleteMsg(ctx, raw.Sequence); err != nil {
		w.log.Debug("queue sweep: delete", slog.Any("err", err))
		return
	}
	if job == nil {
		w.countExpired(tenant) // an unreadable job, which has no event
	}
	if ended != nil && ended.Data.Status != contracts.StatusFailed {
		return // a job that had ended (a cancel) only leaves the queue
	}
	w.log.Warn("job waited longer than its tool's queue-time limit with no worker serving it; moved to the DLQ",
		slog.String("tool", tool), slog.String("tenant", tenant), slog.Uint64("seq", raw.Sequence), slog.Duration("limit", limit))
}

// countExpired tells the observer, if it counts them, of a job the sweep
// dead-lettered.
func (w *Worker) countExpired(tenant string) {
	if obs, ok := w.cfg.Observer.(QueueExpiryObserver); ok {
		obs.QueueExpired(tenant)
	}
}
