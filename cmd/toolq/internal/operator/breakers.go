package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/lifecycle"
)

// DefaultBreakersTTL is the breakers bucket's TTL: a record not rewritten
// for this long (its worker died) is gone. Workers rewrite theirs every
// third of it.
const DefaultBreakersTTL = 30 * time.Second

// BreakerBoardConfig configures a BreakerBoard.
type BreakerBoardConfig struct {
	// Subjects names the bucket; prefix "toolq" by default.
	Subjects contracts.Subjects
	// Replicas of the bucket when the board creates it; 1 by default.
	Replicas int
	// Worker is the worker's name; its key token is
	// contracts.BreakerWorkerToken of it. Required.
	Worker string
	// TTL is the bucket's TTL (every board of a bus must use the same);
	// DefaultBreakersTTL when 0.
	TTL time.Duration
	// States returns the worker's breakers now: provider → model → state
	// (contracts.BreakerClosed, BreakerHalfOpen, BreakerOpen). It must not
	// call back into the board. Required.
	States func() map[string]map[string]string
	// Timeout bounds one write; 5 s by default.
	Timeout time.Duration
	// Logger receives write failures; slog.Default() when nil.
	Logger *slog.Logger
}

// BreakerBoard keeps one worker's provider breakers in the breakers bucket,
// one contracts.BreakerRecord per provider under
// contracts.BreakerKey(provider, worker token): written at once after a
// change (Changed) and again every third of the bucket's TTL, so the
// record of a worker that died expires with the TTL; Stop deletes them. It
// is a worker.Extension.
type BreakerBoard struct {
	js  jetstream.JetStream
	cfg BreakerBoardConfig
	svc *lifecycle.Service
	log *slog.Logger

	mu      sync.Mutex
	kv      jetstream.KeyValue
	changes map[string]contracts.BreakerModel // provider\x00model → last change
	written map[string]bool                   // keys written
	kick    chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

// NewBreakerBoard makes a board; Start creates the bucket.
func NewBreakerBoard(js jetstream.JetStream, cfg *BreakerBoardConfig) (*BreakerBoard, error) {
	if js == nil || cfg == nil {
		return nil, errors.New("operator: breaker board: nil JetStream or config")
	}
	c := *cfg
	if c.Worker == "" || c.States == nil {
		return nil, errors.New("operator: breaker board: Worker and States are required")
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.TTL <= 0 {
		c.TTL = DefaultBreakersTTL
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	b := &BreakerBoard{
		js: js, cfg: c, log: c.Logger, changes: map[string]contracts.BreakerModel{},
		written: map[string]bool{}, kick: make(chan struct{}, 1),
	}
	if b.log == nil {
		b.log = slog.Default()
	}
	b.svc = lifecycle.New(&lifecycle.Config{Start: b.start, Stop: b.stop})
	return b, nil
}

// BreakersBucketConfig is the breakers bucket: History 1, the TTL as the
// bucket's MaxAge (a key lives TTL after its last write), 16 MiB.
func BreakersBucketConfig(s contracts.Subjects, replicas int, ttl time.Duration) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket: s.BreakersBucket(), Description: "toolq: provider breakers, per worker", History: 1,
		TTL: ttl, MaxBytes: 16 << 20, MaxValueSize: 256 << 10, Replicas: replicas, Storage: jetstream.FileStorage,
	}
}

// Start creates the bucket, writes the current state and starts the loop.
func (b *BreakerBoard) Start(ctx context.Context) error { return b.svc.Start(ctx) }

// Stop ends the loop and deletes the worker's records.
func (b *BreakerBoard) Stop(ctx context.Context) error { return b.svc.Stop(ctx) }

// Changed records a breaker's change and has the records written at once.
// It never blocks: it may run under the breaker's lock.
func (b *BreakerBoard) Changed(provider, model, to string, at time.Time, retryAfterMs int64) {
	b.mu.Lock()
	b.changes[provider+"\x00"+model] = contracts.BreakerModel{Model: model, State: to, Since: at.UTC(), RetryAfterMs: retryAfterMs}
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

func (b *BreakerBoard) start(ctx context.Context) error {
	kv, err := bus.EnsureKV(ctx, b.js, BreakersBucketConfig(b.cfg.Subjects, b.cfg.Replicas, b.cfg.TTL))
	if err != nil {
		return err
	}
	// The loop outlives Start's ctx: Stop ends it.
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.mu.Lock()
	b.kv, b.cancel, b.done = kv, cancel, make(chan struct{})
	done := b.done
	b.mu.Unlock()
	go b.loop(lctx, done)
	return nil
}

func (b *BreakerBoard) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(b.cfg.TTL / 3)
	defer tick.Stop()
	b.write(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.kick:
		case <-tick.C:
		}
		b.write(ctx)
	}
}

// records builds the worker's records from the breakers' states now and
// the changes seen.
func (b *BreakerBoard) records(now time.Time) []contracts.BreakerRecord {
	// Outside b.mu: asking a breaker its state may change it (open to
	// half-open), which calls Changed.
	states := b.cfg.States()
	token := contracts.BreakerWorkerToken(b.cfg.Worker)
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []contracts.BreakerRecord
	for provider, models := range states {
		if !contracts.ValidID(provider) || len(models) == 0 {
			continue
		}
		rec := contracts.BreakerRecord{Worker: token, Provider: provider, Updated: now}
		for model, state := range models {
			m := contracts.BreakerModel{Model: model, State: state}
			if c, ok := b.changes[provider+"\x00"+model]; ok && c.State == state {
				m.Since, m.RetryAfterMs = c.Since, c.RetryAfterMs
			}
			rec.Breakers = append(rec.Breakers, m)
		}
		sort.Slice(rec.Breakers, func(i, j int) bool { return rec.Breakers[i].Model < rec.Breakers[j].Model })
		out = append(out, rec)
	}
	return out
}

// write puts every record; a failure is logged and the next tick retries.
func (b *BreakerBoard) write(ctx context.Context) {
	for _, rec := range b.records(time.Now().UTC()) {
		data, err := json.Marshal(rec)
		if err != nil {
			continue
		}
		key := contracts.BreakerKey(rec.Provider, rec.Worker)
		wctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
		_, err = b.kv.Put(wctx, key, data)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				b.log.Warn("breaker state not written", slog.String("key", key), slog.Any("err", err))
			}
			continue
		}
		b.mu.Lock()
		b.written[key] = true
		b.mu.Unlock()
	}
}

func (b *BreakerBoard) stop(ctx context.Context) error {
	b.mu.Lock()
	cancel, done, kv := b.cancel, b.done, b.kv
	b.mu.Unlock()
	cancel()
	<-done
	b.mu.Lock()
	keys := make([]string, 0, len(b.written))
	for k := range b.written {
		keys = append(keys, k)
	}
	b.written = map[string]bool{}
	b.mu.Unlock()
	var errs []error
	for _, k := range keys {
		dctx, dcancel := context.WithTimeout(ctx, b.cfg.Timeout)
		if err := kv.Delete(dctx, k); err != nil {
			errs = append(errs, fmt.Errorf("operator: breaker board: delete %s: %w", k, err))
		}
		dcancel()
	}
	return errors.Join(errs...)
}

// ReadBreakers returns every live record of the breakers bucket (none when
// it does not exist), by provider, then worker. A record whose key does not
// name its own provider and worker is skipped.
func ReadBreakers(ctx context.Context, js jetstream.JetStream, s contracts.Subjects) ([]contracts.BreakerRecord, error) {
	kv, err := js.KeyValue(ctx, s.BreakersBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("breakers bucket: %w", err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("breakers: %w", err)
	}
	defer func() { _ = keys.Stop() }()
	var out []contracts.BreakerRecord
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue // expired or deleted meanwhile
		}
		var rec contracts.BreakerRecord
		if json.Unmarshal(e.Value(), &rec) != nil || k != contracts.BreakerKey(rec.Provider, rec.Worker) ||
			!contracts.ValidID(rec.Provider) || !contracts.ValidID(rec.Worker) {
			continue
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Provider != out[j].Provider {
			return out[i].Provider < out[j].Provider
		}
		return strings.Compare(out[i].Worker, out[j].Worker) < 0
	})
	return out, nil
}
