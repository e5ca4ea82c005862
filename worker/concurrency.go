package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

// Concurrency keys: a job with Concurrency {key, limit} runs only while it
// holds one of the key's slots 0..limit-1, a lease in the concurrency
// bucket (contracts.ConcurrencyLeaseKey). A lease is taken with a
// create-only write, so two workers never hold one slot; it is renewed
// every third of the lease TTL while its job runs, deleted (at its own
// revision) when the job ends, and expires with its worker.

// maxLeaseProbes bounds the slots one attempt to take a lease tries: all of
// them up to this limit, then that many at random.
const maxLeaseProbes = 16

// leasePoll is how often a held job tries again for a slot of its key.
const leasePoll = 200 * time.Millisecond

type leases struct {
	kv  jetstream.KeyValue
	ttl time.Duration
	log *slog.Logger

	mu     sync.Mutex
	wake   map[string]chan struct{}   // per key: closed when a lease of it is released here
	queues map[string][]chan struct{} // per key: the jobs waiting here, in order; the first one tries
}

func (w *Worker) startLeases(ctx context.Context) error {
	kv, err := bus.EnsureKV(ctx, w.js, jetstream.KeyValueConfig{
		Bucket:       w.cfg.Subjects.ConcurrencyBucket(),
		Description:  "toolq concurrency-key leases (expire unless renewed)",
		TTL:          w.cfg.ConcurrencyLeaseTTL,
		History:      1,
		MaxValueSize: 256,
		MaxBytes:     64 << 20,
		Storage:      w.cfg.Storage,
		Replicas:     w.cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("worker: concurrency bucket: %w", err)
	}
	w.leases = &leases{kv: kv, ttl: w.cfg.ConcurrencyLeaseTTL, log: w.log, wake: map[string]chan struct{}{}, queues: map[string][]chan struct{}{}}
	return nil
}

// lease is one held slot of a concurrency key.
type lease struct {
	l    *leases
	key  string
	wake string
	mu   sync.Mutex
	rev  uint64
	stop chan struct{}
	done chan struct{}
}

// take tries the slots of c once and returns the lease it got, nil when
// every slot it tried is held.
func (l *leases) take(ctx context.Context, tenant string, c *contracts.ConcurrencyLimit, jobID string) (*lease, error) {
	probes := min(c.Limit, maxLeaseProbes)
	start := rand.IntN(c.Limit) //nolint:gosec // spreading probes, not a secret
	for i := range probes {
		n := (start + i) % c.Limit
		if c.Limit > maxLeaseProbes {
			n = rand.IntN(c.Limit) //nolint:gosec // as above
		}
		key := contracts.ConcurrencyLeaseKey(tenant, c.Key, n)
		rev, err := l.kv.Create(ctx, key, []byte(jobID))
		if errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return nil, err
		}
		ls := &lease{l: l, key: key, wake: tenant + "\x00" + c.Key, rev: rev, stop: make(chan struct{}), done: make(chan struct{})}
		go ls.renew([]byte(jobID)) //nolint:gosec,contextcheck // G118: the renewals live until release, not until ctx ends
		return ls, nil
	}
	return nil, nil
}

// wakeOf returns the channel closed at the next local release of a lease
// of the key.
func (l *leases) wakeOf(k string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch, ok := l.wake[k]
	if !ok {
		ch = make(chan struct{})
		l.wake[k] = ch
	}
	return ch
}

// join puts a waiting job in line for key k on this worker; only the first
// in line tries for a slot (no herd of tries at each release). The channel
// is closed when the job is first; leave takes it out of line.
func (l *leases) join(k string) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	turn := make(chan struct{})
	l.queues[k] = append(l.queues[k], turn)
	if len(l.queues[k]) == 1 {
		close(turn)
	}
	return turn
}

func (l *leases) leave(k string, turn chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queues[k]
	for i, c := range q {
		if c != turn {
			continue
		}
		q = append(q[:i], q[i+1:]...)
		if i == 0 && len(q) > 0 {
			close(q[0])
		}
		break
	}
	if len(q) == 0 {
		delete(l.queues, k)
	} else {
		l.queues[k] = q
	}
}

func (l *leases) woke(k string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ch, ok := l.wake[k]; ok {
		close(ch)
		delete(l.wake, k)
	}
}

// renew writes the lease again every third of its TTL until released. A
// renewal that fails (the lease expired and another worker took the slot,
// after this worker lost the server for a TTL) is logged: the job runs on.
func (ls *lease) renew(value []byte) {
	defer close(ls.done)
	tick := time.NewTicker(ls.l.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-ls.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), ls.l.ttl/3)
		ls.mu.Lock()
		rev, err := ls.l.kv.Update(ctx, ls.key, value, ls.rev)
		if err == nil {
			ls.rev = rev
		}
		ls.mu.Unlock()
		cancel()
		if err != nil {
			ls.l.log.Warn("concurrency lease not renewed", slog.String("lease", ls.key), slog.Any("err", err))
		}
	}
}

// release ends the renewals and deletes the lease, only at the revision
// this worker wrote (an expired lease another job holds now stays).
func (ls *lease) release() {
	close(ls.stop)
	<-ls.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ls.mu.Lock()
	rev := ls.rev
	ls.mu.Unlock()
	if err := ls.l.kv.Delete(ctx, ls.key, jetstream.LastRevision(rev)); err != nil {
		ls.l.log.Debug("concurrency lease not deleted (it expires)", slog.String("lease", ls.key), slog.Any("err", err))
	}
	ls.l.woke(ls.wake)
}

// slotHold says whether the goroutine of a job holds one of its tool's
// slots: a job that waits for its concurrency key gives its slot back.
type slotHold struct {
	slots *slots
	class slotClass
	held  bool
}

// concurrencySlot takes a lease of job's concurrency key before the job
// runs. When every slot of the key is held, the job waits for one on this
// worker, delivered and kept alive by the heartbeats of in-flight jobs, so
// it spends no attempt: it gives its tool slot back while it waits (the
// tool's pull loops take no more jobs while ConcurrencyWaiters of them
// wait so), announces the wait
// once with a throttled event, queues behind the key's other waiting jobs
// on this worker (the first of them tries, at every local release of the
// key and every leasePoll), and takes a tool slot again before it runs. ok is
// false when the job ended while it waited (cancel, shutdown), with out
// its outcome.
func (w *Worker) concurrencySlot(ctx context.Context, log *slog.Logger, t *tool, msg jetstream.Msg, job *contracts.Job,
	attempt int, lastSeq *uint64, h *slotHold,
) (ls *lease, out Outcome, ok bool) {
	c := job.Concurrency
	k := job.Tenant + "\x00" + c.Key
	var turn chan struct{}
	defer func() {
		if turn != nil {
			w.leases.leave(k, turn)
		}
	}()
	for first := true; ; first = false {
		l, err := w.leases.take(ctx, job.Tenant, c, job.ID)
		if l != nil {
			if !h.held && !h.slots.acquire(ctx.Done(), h.class, 0, nil) {
				l.release() //nolint:contextcheck // the lease is deleted even when ctx has ended
				return nil, w.endWaiting(ctx, log, msg, job, attempt, *lastSeq), false
			}
			h.held = true
			return l, OutcomeAnswered, true
		}
		if err != nil {
			log.Debug("concurrency lease", slog.Any("err", err))
		}
		if first {
			// Never wait holding a tool slot: a job that has its lease
			// may need that slot to run.
			t.parked.Add(1)
			defer t.parked.Add(-1)
			if h.held {
				h.slots.release(1)
				h.held = false
			}
			w.announceThrottled(ctx, log, job, attempt, lastSeq, contracts.ThrottledDetails{WaitingFor: "concurrency", Key: c.Key, Limit: c.Limit})
			// In line behind the key's other waiting jobs here: only the
			// first tries for a slot.
			turn = w.leases.join(k)
			select {
			case <-turn:
			case <-ctx.Done():
				return nil, w.endWaiting(ctx, log, msg, job, attempt, *lastSeq), false
			}
		}
		select {
		case <-ctx.Done():
			return nil, w.endWaiting(ctx, log, msg, job, attempt, *lastSeq), false
		case <-w.leases.wakeOf(k):
		case <-time.After(leasePoll):
		}
	}
}

// announceThrottled publishes the job's throttled event for this attempt (one an
// attempt: a job that waits for its rate limit and then for its key says
// so once).
func (w *Worker) announceThrottled(ctx context.Context, log *slog.Logger, job *contracts.Job, attempt int, lastSeq *uint64, d contracts.ThrottledDetails) {
	ev := contracts.NewEvent(w.source, job, contracts.StatusThrottled, attempt, time.Now())
	ev.Data.Attempt = attempt
	ev.Data.Result, _ = json.Marshal(d)
	seq, err := w.events.Publish(ctx, ev, *lastSeq, traceParent(ctx))
	if err != nil {
		log.Debug("throttled event not published", slog.Any("err", err))
		return
	}
	*lastSeq = seq
}

// endWaiting ends a job whose wait for a concurrency slot ended: handed
// back at a shutdown, cancelled at a cancel.
func (w *Worker) endWaiting(ctx context.Context, log *slog.Logger, msg jetstream.Msg, job *contracts.Job, attempt int, lastSeq uint64) Outcome {
	if errors.Is(context.Cause(ctx), errJobCancelled) {
		return w.finish(log, msg, job, attempt, lastSeq, contracts.StatusCancelled, nil, //nolint:contextcheck // finish bounds its own writes, as everywhere in process
			contracts.Errorf(contracts.CodeCancelled, "job was cancelled while it waited for a slot of its concurrency key"))
	}
	_ = msg.Nak()
	return OutcomeRequeued
}
