package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

// Rate limits: the operator puts a tool's limit for a tenant in the limits
// bucket (`toolq limits set`); every worker follows the bucket, and before
// a limited job runs it takes one start from the limit's budget with the
// generic cell rate algorithm: the bucket keeps the theoretical arrival
// time (TAT) of the next start, which a worker moves on by one interval
// with a compare-and-set write. A start is allowed while the TAT is less
// than burst-1 intervals ahead of now; otherwise the job waits, as a job
// waiting for its concurrency key does (no attempt spent, its tool slot
// given back, one throttled event).

type rateLimits struct {
	kv  jetstream.KeyValue
	log *slog.Logger

	mu    sync.RWMutex
	byKey map[string]*contracts.RateLimit // by RateLimitKey
}

func (w *Worker) startRateLimits(ctx context.Context) error {
	kv, err := bus.EnsureKV(ctx, w.js, jetstream.KeyValueConfig{
		Bucket:       w.cfg.Subjects.LimitsBucket(),
		Description:  "toolq rate limits (limit.*) and their state (tat.*)",
		History:      1,
		MaxValueSize: 1024,
		MaxBytes:     16 << 20,
		Storage:      w.cfg.Storage,
		Replicas:     w.cfg.Replicas,
	})
	if err != nil {
		return fmt.Errorf("worker: limits bucket: %w", err)
	}
	r := &rateLimits{kv: kv, log: w.log, byKey: map[string]*contracts.RateLimit{}}
	watch, err := kv.Watch(w.runCtx, "limit.>") //nolint:contextcheck // the watch lives until Stop
	if err != nil {
		return fmt.Errorf("worker: watch limits: %w", err)
	}
	// The current limits before the first job, then the changes.
	for {
		select {
		case <-ctx.Done():
			_ = watch.Stop()
			return fmt.Errorf("worker: limits: %w", ctx.Err())
		case e, ok := <-watch.Updates():
			if !ok {
				return errors.New("worker: limits: watch closed")
			}
			if e == nil {
				w.rates = r
				w.loops.Add(1)
				go func() {
					defer w.loops.Done()
					defer func() { _ = watch.Stop() }()
					for e := range watch.Updates() {
						if e != nil {
							r.changed(e)
						}
					}
				}()
				return nil
			}
			r.changed(e)
		}
	}
}

// changed applies one entry of the limits bucket. A malformed limit is
// logged and leaves the tool unlimited.
func (r *rateLimits) changed(e jetstream.KeyValueEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.byKey, e.Key())
	if e.Operation() != jetstream.KeyValuePut {
		return
	}
	lim, err := contracts.DecodeRateLimit(e.Key(), e.Value())
	if err != nil {
		r.log.Error("rate limit refused", slog.String("key", e.Key()), slog.Any("err", err))
		return
	}
	r.byKey[e.Key()] = lim
}

// effective is def, or the operator's limit that replaces it (the first of
// def.OverrideKeys found), counted on def's state; nil when def has no
// rate of its own (Rate 0: only an operator's limit applies) and nothing
// replaces it.
func (r *rateLimits) effective(def *contracts.RateLimit) *contracts.RateLimit {
	if r == nil || def == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, k := range def.OverrideKeys() {
		if o := r.byKey[k]; o != nil {
			lim := *def
			lim.Rate, lim.Per, lim.Burst = o.Rate, o.Per, o.Burst
			return &lim
		}
	}
	if def.Rate == 0 {
		return nil
	}
	return def
}

func (r *rateLimits) of(tenant, tool string) *contracts.RateLimit {
	if r == nil {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byKey[contracts.RateLimitKey(tenant, tool)]
}

// take tries to take one start of lim: 0 when taken, else how long until
// one may be.
func (r *rateLimits) take(ctx context.Context, lim *contracts.RateLimit) (time.Duration, error) {
	key := lim.StateKey()
	interval := lim.Interval()
	tolerance := interval * time.Duration(lim.Burst-1)
	for range 100 {
		now := time.Now()
		var (
			tat time.Time
			rev uint64
		)
		e, err := r.kv.Get(ctx, key)
		switch {
		case err == nil:
			rev = e.Revision()
			if ns, perr := strconv.ParseInt(strings.TrimSpace(string(e.Value())), 10, 64); perr == nil {
				tat = time.Unix(0, ns)
			}
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			return 0, err
		}
		if tat.Before(now) {
			tat = now
		}
		if allow := tat.Add(-tolerance); allow.After(now) {
			return allow.Sub(now), nil
		}
		next := []byte(strconv.FormatInt(tat.Add(interval).UnixNano(), 10))
		if rev == 0 {
			_, err = r.kv.Create(ctx, key, next)
		} else {
			_, err = r.kv.Update(ctx, key, next, rev)
		}
		if err == nil {
			return 0, nil
		}
		if errors.Is(err, jetstream.ErrKeyExists) || strings.Contains(err.Error(), "wrong last sequence") {
			continue // another worker took one meanwhile
		}
		return 0, err
	}
	return interval, nil
}

// rateSlot takes one start of the job's tool's rate limit before the job
// runs, waiting as concurrencySlot does while the limit is spent.
func (w *Worker) rateSlot(ctx context.Context, log *slog.Logger, t *tool, msg jetstream.Msg, job *contracts.Job,
	attempt int, lastSeq *uint64, h *slotHold, lim *contracts.RateLimit,
) (out Outcome, ok bool) {
	k := "rate\x00" + lim.StateKey()
	var turn chan struct{}
	defer func() {
		if turn != nil {
			w.leases.leave(k, turn)
		}
	}()
	for first := true; ; first = false {
		wait, err := w.rates.take(ctx, lim)
		if err != nil {
			log.Warn("rate limit unreadable; waiting", slog.Any("err", err))
			wait = time.Second
		}
		if wait == 0 {
			if !h.held && !h.slots.acquire(ctx.Done(), h.class, 0, nil) {
				return w.endWaiting(ctx, log, msg, job, attempt, *lastSeq), false
			}
			h.held = true
			return OutcomeAnswered, true
		}
		if first {
			t.parked.Add(1)
			defer t.parked.Add(-1)
			if h.held {
				h.slots.release(1)
				h.held = false
			}
			d := contracts.ThrottledDetails{WaitingFor: "rate", Key: lim.Tool, Rate: lim.String(), Provider: lim.Provider}
			w.announceThrottled(ctx, log, job, attempt, lastSeq, d)
			turn = w.leases.join(k)
			select {
			case <-turn:
				continue // first in line: try again at once
			case <-ctx.Done():
				return w.endWaiting(ctx, log, msg, job, attempt, *lastSeq), false
			}
		}
		select {
		case <-ctx.Done():
			return w.endWaiting(ctx, log, msg, job, attempt, *lastSeq), false
		case <-time.After(min(wait, time.Second)):
		}
	}
}

// jobRateLimits are the limits a job takes a start of before it runs, after
// its tool's for its tenant: those its tool pack names (ToolConfig.RateLimits,
// say the provider key a code_execution job will call), each replaced by the
// operator's limit under its key when there is one. A limit that is not
// valid is logged and skipped.
func (w *Worker) jobRateLimits(log *slog.Logger, t *tool, job *contracts.Job) []*contracts.RateLimit {
	if t.cfg.RateLimits == nil || w.rates == nil {
		return nil
	}
	var out []*contracts.RateLimit
	for _, def := range t.cfg.RateLimits(job) {
		if def == nil {
			continue
		}
		if def.Rate != 0 {
			if err := def.Validate(); err != nil {
				log.Error("tool's rate limit refused", slog.String("limit", def.Subject()), slog.Any("err", err))
				continue
			}
		}
		if lim := w.rates.effective(def); lim != nil {
			out = append(out, lim)
		}
	}
	return out
}

// Rates are the worker's rate limits as a tool pack sees them: for a
// request a job makes beyond the one its worker counted before it ran
// (a retry, a failover), in the handler, within the job's deadline.
type Rates struct{ w *Worker }

// Rates returns the worker's rate limits; usable once the worker started.
func (w *Worker) Rates() *Rates { return &Rates{w: w} }

// Effective returns def, or the operator's limit that replaces it (the
// first of def.OverrideKeys in the limits bucket); nil when neither limits
// anything (def.Rate 0 and no operator's limit).
func (r *Rates) Effective(def *contracts.RateLimit) *contracts.RateLimit {
	return r.w.rates.effective(def)
}

// Take takes one start of lim (an Effective limit) across all workers:
// 0 when taken, else how long until one may be (nothing is taken then).
// Before the worker started it returns ErrNotStarted.
func (r *Rates) Take(ctx context.Context, lim *contracts.RateLimit) (time.Duration, error) {
	rates := r.w.rates
	if rates == nil {
		return 0, ErrNotStarted
	}
	if lim == nil {
		return 0, nil
	}
	if err := lim.Validate(); err != nil {
		return 0, err
	}
	return rates.take(ctx, lim)
}
