package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// startCancelWatch loads the cancelled-job bucket and follows it, so that a
// queued job cancelled at any time never starts. It returns once the initial
// keys are loaded. Every cancel recorded after that also goes to the cancel
// hooks: the worker's watch is the one cancel feed of the process.
func (w *Worker) startCancelWatch(ctx context.Context) error {
	kv, err := w.js.KeyValue(ctx, w.cfg.Subjects.CancelsBucket())
	if err != nil {
		return fmt.Errorf("worker: cancels bucket: %w", err)
	}
	watcher, err := kv.WatchAll(w.runCtx, jetstream.IgnoreDeletes()) //nolint:contextcheck // the watch lives until Stop, not until Start's ctx ends
	if err != nil {
		return fmt.Errorf("worker: watch cancels: %w", err)
	}
	w.watcher = watcher
	w.cancelsKV = kv
	if len(w.onCancel) > 0 {
		w.feed = make(chan cancelNote, cancelFeedBuffer)
		w.loops.Add(1)
		go w.runCancelHooks(w.feed)
	}
	ready := make(chan struct{})
	w.loops.Add(1)
	go func() {
		defer w.loops.Done()
		initial := true
		for entry := range watcher.Updates() {
			if entry == nil {
				if initial {
					initial = false
					close(ready)
				}
				continue
			}
			// The key names the job's tenant, session and id
			// (contracts.CancelKey); a key of any other shape is no
			// cancel of any job.
			tenant, session, id, ok := contracts.ParseCancelKey(entry.Key())
			if !ok {
				continue
			}
			w.markCancelled(entry.Key())
			if !initial {
				w.announce(cancelNote{tenant: tenant, session: session, jobID: id})
			}
		}
		if initial {
			close(ready)
		}
	}()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("worker: loading cancels: %w", ctx.Err())
	}
}

// cancelNote is one cancel on its way to the hooks.
type cancelNote struct{ tenant, session, jobID string }

// cancelFeedBuffer is how many cancels may wait for slow hooks before the
// watch waits for them.
const cancelFeedBuffer = 256

// announce hands a cancel to the hook loop, unless there are no hooks.
func (w *Worker) announce(n cancelNote) {
	if w.feed == nil || !contracts.ValidID(n.session) || !contracts.ValidID(n.jobID) {
		return
	}
	select {
	case w.feed <- n:
	case <-w.runCtx.Done():
	}
}

// runCancelHooks passes each cancel to every hook, in order, until the
// worker stops.
func (w *Worker) runCancelHooks(feed <-chan cancelNote) {
	defer w.loops.Done()
	ctx := w.runCtx
	for {
		select {
		case <-ctx.Done():
			return
		case n := <-feed:
			for _, h := range w.onCancel {
				h(ctx, n.tenant, n.session, n.jobID)
			}
		}
	}
}

// onCancelMsg handles a core-NATS cancel of a running job, of the default
// tenant or (<prefix>.t.<tenant>.cancel.<id>) of the tenant of the subject.
// The body is the job's session: a cancel cancels the job only when it
// names the job's session, and one without a valid session does nothing.
func (w *Worker) onCancelMsg(m *nats.Msg) {
	id := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	tenant, ok := w.cfg.Subjects.TenantOf(m.Subject)
	session := string(m.Data)
	if ok && contracts.ValidID(id) && contracts.ValidID(session) {
		w.markCancelled(contracts.CancelKey(tenant, session, id))
	}
}

// markCancelled remembers a cancel and cancels the job if it runs here;
// key is the job's contracts.CancelKey, which in-flight jobs are kept by
// too, so a cancel reaches only the job of the session it names.
func (w *Worker) markCancelled(key string) {
	w.cancels.add(key, time.Now())
	w.mu.Lock()
	defer w.mu.Unlock()
	if f, ok := w.inflight[key]; ok {
		f.cancel(errJobCancelled)
	}
}

func (w *Worker) eventsMaxAge() time.Duration {
	if w.cfg.EventsMaxAge > 0 {
		return w.cfg.EventsMaxAge
	}
	return 24 * time.Hour
}

// isCancelled reports whether a job about to start was cancelled (key is
// its contracts.CancelKey): from memory, or, when memory had to forget
// cancels that are still in the bucket, from the bucket.
func (w *Worker) isCancelled(key string) bool {
	ok, lookup := w.cancels.has(key, time.Now())
	if ok || !lookup || w.cancelsKV == nil {
		return ok
	}
	ctx, cancel := context.WithTimeout(w.runCtx, 5*time.Second)
	defer cancel()
	_, err := w.cancelsKV.Get(ctx, key)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		w.log.Debug("cancel look-up", slog.String("key", key), slog.Any("err", err))
	}
	return err == nil
}

// cancelledLocked is isCancelled from memory alone, for a job that is
// already in flight (a cancel after this point reaches it through inflight).
func (w *Worker) cancelledLocked(key string) bool {
	ok, _ := w.cancels.has(key, time.Now())
	return ok
}

// maxRememberedCancels bounds the cancels a worker keeps in memory.
const maxRememberedCancels = 100_000

// cancelMemory holds recent cancels by cancel key for the events' lifetime, at
// most max of them, oldest out first: adding and looking up are O(1)
// under its own lock, not the worker's. Once a cancel was dropped for
// room before it expired, has asks for a look-up in the bucket until that
// cancel would have expired.
type cancelMemory struct {
	mu          sync.Mutex
	ttl         time.Duration
	max         int
	at          map[string]time.Time
	order       []cancelEntry // by time added; order[head:] is live
	head        int
	forgotUntil time.Time
}

type cancelEntry struct {
	id string
	at time.Time
}

func newCancelMemory(ttl time.Duration, maxEntries int) *cancelMemory {
	return &cancelMemory{ttl: ttl, max: maxEntries, at: map[string]time.Time{}}
}

func (m *cancelMemory) add(id string, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.at[id]; ok {
		return
	}
	horizon := now.Add(-m.ttl)
	for m.head < len(m.order) {
		e := m.order[m.head]
		expired := !e.at.After(horizon)
		if !expired && len(m.at) < m.max {
			break
		}
		if !expired {
			m.forgotUntil = e.at.Add(m.ttl)
		}
		delete(m.at, e.id)
		m.order[m.head] = cancelEntry{}
		m.head++
	}
	if m.head > len(m.order)/2 {
		m.order = append(m.order[:0], m.order[m.head:]...)
		m.head = 0
	}
	m.at[id] = now
	m.order = append(m.order, cancelEntry{id: id, at: now})
}

// has reports whether id is remembered as cancelled, and whether a miss
// needs a look-up because memory dropped live cancels.
func (m *cancelMemory) has(id string, now time.Time) (ok, lookup bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if at, found := m.at[id]; found && now.Sub(at) < m.ttl {
		return true, false
	}
	return false, now.Before(m.forgotUntil)
}

func (m *cancelMemory) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.at)
}
