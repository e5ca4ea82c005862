package codemode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// A run is due when it must be expired (past its TTL, no resume holding
// it) or, for an autoResume run, resumed because nothing else will: a
// resume lease ran out (its worker died mid-resume, its trigger already
// acknowledged) or every result is back with no resume under way. Every
// record write carries when its run is next due (dueHeader, record.dueAt).
// Two things act on it, and nothing follows the bucket's writes:
//
//   - the sweep, every SweepInterval: one worker of the fleet at a time
//     (scanKey) reads the headers of the bucket's entries in one pass,
//     loads only the runs that are due, and arms a timer for those due
//     before the next sweep;
//   - the timers (dueTimers), which fire at the due time: armed by the
//     sweep, and by the writing worker for a run due before the next sweep
//     (a short TTL, a resume lease). So a run is expired on time while the
//     workers that armed its timer live, and at most an interval late when
//     none does.
//
// The entries' own TTL (expiryGrace past the run's) is the backstop for a
// fleet that swept nothing for that long; the MaxAge marker it leaves is
// handled by the sweep as the expiry consumer handled it before, which also
// covers records written by older workers.
const (
	// dueHeader is a record entry's due time, in Unix milliseconds.
	dueHeader = "Toolq-Run-Due"
	// expiryGrace is how long past its run's expiry the server keeps an
	// entry that no timer or sweep handled.
	expiryGrace = 24 * time.Hour
	// scanKey is the runs bucket's entry whose write claims a sweep; it is
	// no run key (parseRunKey refuses it).
	scanKey = "_sweep"
	// dueQueue is how many fired timers wait for the sweep loop; beyond it
	// a run waits for the next sweep.
	dueQueue = 1024
	// legacyExpiryConsumer is the durable consumer of the runs bucket's
	// writes that earlier versions expired runs with.
	legacyExpiryConsumer = "codemode_expiry"
)

// dueTimers are a worker's timers for runs due soon, by run key: those it
// wrote and those its sweep found, due within the horizon (more than the
// time to the next sweep). Each fires once, handing its key to the sweep
// loop, which loads the run and acts if it is still due. A run due later
// gets its timer from the sweep before it, so a worker holds timers only
// for the runs due in the next interval or so, not for every run it wrote
// (most of which another worker resumes or ends). The timers are a
// shortcut: the sweep finds every due run without them, an interval late.
type dueTimers struct {
	horizon time.Duration
	mu      sync.Mutex
	by      map[string]*time.Timer
	fired   chan string
}

func newDueTimers(horizon time.Duration) *dueTimers {
	return &dueTimers{horizon: horizon, by: map[string]*time.Timer{}, fired: make(chan string, dueQueue)}
}

// set (re)arms the timer of key for at, if at is after now and within the
// horizon; else it disarms it.
func (d *dueTimers) set(key string, at, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t, ok := d.by[key]; ok {
		t.Stop()
		delete(d.by, key)
	}
	if !at.After(now) || at.Sub(now) > d.horizon {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(at.Sub(now), func() {
		d.mu.Lock()
		if d.by[key] == t {
			delete(d.by, key)
		}
		d.mu.Unlock()
		select {
		case d.fired <- key:
		default: // the sweep finds it
		}
	})
	d.by[key] = t
}

// stop disarms the timer of key, if any.
func (d *dueTimers) stop(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t, ok := d.by[key]; ok {
		t.Stop()
		delete(d.by, key)
	}
}

// stopAll disarms every timer (code mode stops).
func (d *dueTimers) stopAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, t := range d.by {
		t.Stop()
		delete(d.by, k)
	}
}

// sweep handles the runs whose timers fired and, every SweepInterval (with
// jitter, so a fleet does not try in step), sweeps the bucket if no other
// worker did in the last half interval.
func (c *CodeMode) sweep(ctx context.Context) {
	defer c.loops.Done()
	defer c.store.due.stopAll()
	// The first sweep comes soon after start (what a stopped fleet left
	// due is handled at once), the next ones every interval.
	d := time.Duration(rand.Int64N(int64(min(c.cfg.SweepInterval, time.Second)) + 1)) //nolint:gosec // G404: jitter, not a secret
	for {
		next := time.NewTimer(d)
	wait:
		for {
			select {
			case <-ctx.Done():
				next.Stop()
				return
			case key := <-c.store.due.fired:
				c.handleDue(ctx, key)
			case <-next.C:
				break wait
			}
		}
		if claim, ok := c.claimSweep(ctx); ok {
			if err := c.sweepOnce(ctx, claim); err != nil && ctx.Err() == nil {
				c.log.Warn("code mode sweep failed", slog.Any("err", err))
			}
		}
		d = c.cfg.SweepInterval
		d += time.Duration(rand.Int64N(int64(d)/5 + 1)) //nolint:gosec // G404: jitter, not a secret
	}
}

// sweepState is the value of scanKey: the worker that last claimed the
// sweep and the runs stored by tenant ("" the default one) as the last
// finished sweep counted them (RunsObserver reads them from here).
type sweepState struct {
	By   string         `json:"by"`
	Runs map[string]int `json:"runs"`
}

// claim is a sweep this worker claimed: the claim entry's revision and the
// state it wrote.
type claim struct {
	rev   uint64
	state sweepState
}

// claimSweep reports whether this worker sweeps now: it writes scanKey,
// conditionally on the entry it read and carrying its counts on, unless
// another worker wrote it less than half an interval ago (by the server's
// clock).
func (c *CodeMode) claimSweep(ctx context.Context) (claim, bool) {
	kv := c.store.kv
	cl := claim{state: sweepState{By: c.w.Name()}}
	e, err := kv.Get(ctx, scanKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		data, _ := json.Marshal(cl.state)
		cl.rev, err = kv.Create(ctx, scanKey, data)
		return cl, err == nil
	case err != nil:
		return cl, false
	case time.Since(e.Created()) < c.cfg.SweepInterval/2:
		return cl, false
	}
	var last sweepState
	if json.Unmarshal(e.Value(), &last) == nil {
		cl.state.Runs = last.Runs
	}
	data, _ := json.Marshal(cl.state)
	cl.rev, err = kv.Update(ctx, scanKey, data, e.Revision())
	return cl, err == nil
}

// sweepCounts reads the runs stored by tenant as the last finished sweep
// counted them; ok is false before any.
func (c *CodeMode) sweepCounts(ctx context.Context) (map[string]int, bool, error) {
	e, err := c.store.kv.Get(ctx, scanKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var st sweepState
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return nil, false, fmt.Errorf("codemode: sweep state: %w", err)
	}
	return st.Runs, st.Runs != nil, nil
}

// sweepOnce reads the due header of every entry of the runs bucket (the
// last per key, headers only) and handles the runs that are due, those
// written without the header (by hand, or an older worker), and the MaxAge
// markers of entries the server removed. It counts the runs stored by
// tenant on the way and writes the counts into its claim.
func (c *CodeMode) sweepOnce(ctx context.Context, cl claim) error {
	info, err := c.store.runs.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs == 0 {
		return nil
	}
	// One consumer of the sweep's own, read once (no acks, in memory),
	// deleted after; the server also drops it if this worker dies first.
	stream := contracts.KVStream(c.cfg.Subjects.RunsBucket())
	cons, err := c.js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Description:       "code mode sweep",
		FilterSubject:     c.store.subj + ">",
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		HeadersOnly:       true,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return err
	}
	defer func() { _ = c.js.DeleteConsumer(context.WithoutCancel(ctx), stream, cons.CachedInfo().Name) }()
	now := time.Now()
	var due, removed []string
	runs := map[string]int{}
	// The stream holds one message a key, and each message says how many
	// are left after it: a fetch asks for no more than that, so it returns
	// as soon as they are in.
	for left := info.State.Msgs; left > 0; {
		batch, err := cons.Fetch(sweepBatch(left), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			left = meta.NumPending
			key := strings.TrimPrefix(m.Subject(), c.store.subj)
			h := m.Headers()
			switch {
			case h.Get(jetstream.MarkerReasonHeader) == "MaxAge":
				removed = append(removed, key)
			case h.Get("KV-Operation") != "":
				// deleted or purged: the run ended
			default:
				tenant, _, _, ok := parseRunKey(key)
				if !ok {
					continue // scanKey, or no run's
				}
				runs[tenant]++
				at, ok := dueOf(h.Get(dueHeader))
				if !ok || !at.After(now) {
					due = append(due, key)
				} else {
					c.store.due.set(key, at, now)
				}
			}
		}
		if err := batch.Error(); err != nil {
			return err
		}
		if got == 0 {
			break // the bucket emptied meanwhile
		}
	}
	cl.state.Runs = runs
	if data, err := json.Marshal(cl.state); err == nil {
		// Lost to a newer claim only when a sweep took longer than half
		// an interval: that one counts again.
		_, _ = c.store.kv.Update(ctx, scanKey, data, cl.rev)
	}
	for _, key := range removed {
		if tenant, session, runID, ok := parseRunKey(key); ok && ctx.Err() == nil {
			if err := c.expireRemoved(ctx, tenant, session, runID); err != nil {
				c.log.Warn("removed run not expired; the next sweep retries", slog.String("key", key), slog.Any("err", err))
			}
		}
	}
	for _, key := range due {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.handleDue(ctx, key)
	}
	return nil
}

// sweepBatch is how many of left entries one fetch of a sweep asks for.
func sweepBatch(left uint64) int {
	if left > 512 {
		return 512
	}
	return int(left)
}

// dueOf reads a due header; ok is false for none (a record written by
// hand or by an older worker), which is due at once.
func dueOf(header string) (time.Time, bool) {
	ms, err := strconv.ParseInt(header, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// handleDue loads the run of key and expires it, resumes it, or arms a
// timer for when it is due, as it now stands.
func (c *CodeMode) handleDue(ctx context.Context, key string) {
	tenant, session, runID, ok := parseRunKey(key)
	if !ok {
		return
	}
	e, err := c.store.kv.Get(ctx, key)
	if err != nil {
		return // gone: the run ended, or another worker expired it
	}
	rec, err := decodeRecord(e.Value(), tenant, session, runID)
	if err != nil {
		c.log.Warn("due run record unreadable", slog.String("key", key), slog.Any("err", err))
		return
	}
	now := time.Now()
	switch {
	case rec.expired(now):
		c.expireRun(ctx, rec, e.Revision())
	case rec.AutoResume && !rec.ended() && rec.resumable(now) && now.Sub(e.Created()) >= c.cfg.LeaseTTL/2:
		c.log.Info("sweeping a stalled autoResume run", slog.String("run", rec.RunID), slog.String("status", rec.Status))
		rctx, cancel := context.WithTimeout(ctx, c.cfg.MaxSnapshotTTL)
		_, err = c.resume(rctx, rec, e.Revision(), "")
		cancel()
		if err != nil && !errors.Is(err, errStale) && !errors.Is(err, errBusy) && !errors.Is(err, errLeaseLost) {
			c.log.Warn("sweep: resume failed", slog.String("run", rec.RunID), slog.Any("err", err))
		}
	default:
		c.store.due.set(key, rec.dueAt(e.Created(), c.cfg.LeaseTTL), now)
	}
}
