package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/lifecycle"
)

// Handler runs the jobs of one tool. It returns the result (any JSON value)
// or an error: a *contracts.Error is reported with its code and retried only
// when Retryable; Permanent and RetryAfter steer retries; any other error is
// retried and reported as internal_error.
type Handler interface {
	Handle(ctx context.Context, job *contracts.Job) (json.RawMessage, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, job *contracts.Job) (json.RawMessage, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
	return f(ctx, job)
}

// Worker consumes jobs of its registered tools from JetStream, runs them and
// publishes their events. Many workers (processes) share one durable consumer
// per tool.
type Worker struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	leases *leases     // concurrency-key leases
	rates  *rateLimits // rate limits, nil until started
	cfg    Config
	log    *slog.Logger
	source string
	life   *lifecycle.Service

	mu    sync.Mutex
	tools map[string]*tool
	// twins are the tools' consumers of each named tenant's jobs stream,
	// by tenant, with Config.Tenants. tenantMu orders adding and removing
	// a tenant's twins against stopPulling.
	twins       map[string][]*tool
	tenantMu    sync.Mutex
	pullStopped bool // under tenantMu: stopPulling ran; add no twins
	tenantsW    jetstream.KeyWatcher
	exts        []Extension
	onCancel    []CancelHook
	started     bool                 // Start began: no more Register, Use, OnCancel
	stopping    bool                 // Stop began: no new reaper goroutines
	inflight    map[string]*inflight // by contracts.CancelKey
	cancels     *cancelMemory        // recent cancels, by contracts.CancelKey
	lastEvents  lastEvents           // of parked jobs, for Emit

	events *bus.Events
	jobs   jetstream.Stream
	subs   []*nats.Subscription
	// replays bounds the tenants' event replays running at once, in all
	// and each tenant's.
	replays replayCounts
	watcher jetstream.KeyWatcher
	// cancelsKV answers isCancelled when memory had to forget cancels.
	cancelsKV jetstream.KeyValue
	feed      chan cancelNote // to the cancel hooks; nil without hooks

	runCtx context.Context // parent of every job's context
	// catalogKV and catalogPuts are the catalog entries Start wrote, which
	// refreshCatalog keeps written.
	catalogKV   jetstream.KeyValue
	catalogPuts []catalogPut
	runCancel   context.CancelCauseFunc
	wg          sync.WaitGroup // jobs
	loops       sync.WaitGroup // owned background loops, and the job runners
	runners     *runners
}

type tool struct {
	name    string
	handler Handler
	cfg     ToolConfig
	slots   *slots        // shared with the tool's tenant twins
	parked  *atomic.Int64 // jobs waiting for a concurrency slot without a tool slot; shared with the twins
	levels  []*level      // a consumer for each priority level
	tenant  string        // a twin's named tenant, whose jobs stream it consumes; "" for the tool itself
	weight  atomic.Int32  // the tenant's weight (TenantRecord.Weight), updated in place
	obs     ToolObserver  // nil without Config.Observer
	// spanName is the name of its jobs' spans ("toolq.job <tool>"), made
	// once.
	spanName string

	ccMu   sync.Mutex
	cc     *puller // nil while paused
	closed bool
}

type inflight struct {
	msg     jetstream.Msg
	cancel  context.CancelCauseFunc
	started time.Time
	ackWait time.Duration
}

// New returns a worker on connection nc. Register tools, then Start it.
func New(nc *nats.Conn, cfg *Config) (*Worker, error) {
	if nc == nil {
		return nil, errors.New("worker: nil connection")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("worker: jetstream: %w", err)
	}
	w := &Worker{
		nc:       nc,
		js:       js,
		cfg:      c,
		log:      c.Logger.With(slog.String("worker", c.Name)),
		source:   "/toolq/worker/" + c.Name,
		tools:    map[string]*tool{},
		inflight: map[string]*inflight{},
		runners:  newRunners(),
	}
	w.cancels = newCancelMemory(w.eventsMaxAge(), maxRememberedCancels)
	w.life = lifecycle.New(&lifecycle.Config{Start: w.start, Stop: w.stop, ErrStarted: ErrStarted, SoftStop: true})
	if c.Builtins {
		for name, b := range builtins() {
			if err := w.Register(name, b.handler, &ToolConfig{Catalog: b.catalog}); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}

// Name is the worker's name as it appears in events.
func (w *Worker) Name() string { return w.cfg.Name }

// Register adds a tool. cfg overrides the worker's default tool configuration
// field by field; nil keeps the defaults.
func (w *Worker) Register(name string, h Handler, cfg *ToolConfig) error {
	if err := contracts.ValidateTool(name); err != nil {
		return fmt.Errorf("worker: register: %w", err)
	}
	if h == nil {
		return errors.New("worker: register: nil handler")
	}
	var tc ToolConfig
	if cfg != nil {
		tc = *cfg
	}
	tc, err := tc.withDefaults(w.cfg.Tool)
	if err != nil {
		return fmt.Errorf("worker: register %s: %w", name, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return ErrStarted
	}
	if _, ok := w.tools[name]; ok {
		return fmt.Errorf("%w: %s", ErrDuplicateTool, name)
	}
	w.tools[name] = &tool{name: name, handler: h, cfg: tc, slots: newSlots(tc.Concurrency), parked: new(atomic.Int64)}
	return nil
}

// Tools returns the names of the registered tools.
func (w *Worker) Tools() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	names := make([]string, 0, len(w.tools))
	for n := range w.tools {
		names = append(names, n)
	}
	return names
}

// Start creates or updates the streams, starts the extensions (in the order
// of Use), then the consumers, and returns once the worker is consuming. A
// failed Start leaves nothing running, extensions included, and may be
// retried; a second Start while running returns ErrStarted.
func (w *Worker) Start(ctx context.Context) error { return w.life.Start(ctx) }

// Stop stops pulling jobs, lets in-flight jobs finish until ctx ends or
// StopTimeout passes, then cancels the rest; a cancelled job is handed back
// to JetStream at once for another worker. Then it stops the extensions, in
// reverse order, and waits for them; Stop returns when all of that is done.
// A second, concurrent Stop waits for the first (or its own ctx). Stop
// before Start and a second Stop are harmless.
func (w *Worker) Stop(ctx context.Context) error { return w.life.Stop(ctx) }

// Stopped is closed while the worker is not running: before Start, after a
// failed Start, and once a Stop has finished. Take it after Start.
func (w *Worker) Stopped() <-chan struct{} { return w.life.Stopped() }

// start is the lifecycle's start: the bus, then the extensions, then the
// worker's own loops and consumers.
func (w *Worker) start(ctx context.Context) error {
	w.mu.Lock()
	w.started, w.stopping = true, false
	exts := w.exts
	w.mu.Unlock()
	err := w.startBus(ctx)
	if err == nil {
		var up []Extension
		up, err = w.startExtensions(ctx, exts)
		if err == nil {
			err = w.startConsuming(ctx)
		}
		if err != nil {
			// Whatever started stops again, even when ctx is what failed.
			err = errors.Join(err, w.stopExtensions(context.WithoutCancel(ctx), up))
		}
	}
	if err != nil {
		w.mu.Lock()
		w.started = false
		w.mu.Unlock()
		return err
	}
	w.log.Info("worker started", slog.Int("tools", len(w.tools)), slog.Int("extensions", len(exts)))
	return nil
}

// startBus creates or updates the streams and opens the ones the worker
// writes to. Extensions start after it, so Emit works from their start on.
func (w *Worker) startBus(ctx context.Context) error {
	err := bus.Ensure(ctx, w.js, bus.Config{
		Subjects: w.cfg.Subjects, Replicas: w.cfg.Replicas, Storage: w.cfg.Storage,
		EventsMaxAge: w.cfg.EventsMaxAge, Tenants: w.cfg.Tenants, TenantQueueLimit: w.cfg.TenantQueueLimit,
	})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if w.events, err = bus.NewEvents(ctx, w.js, w.cfg.Subjects); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if w.jobs, err = w.js.Stream(ctx, w.cfg.Subjects.JobsStream()); err != nil {
		return fmt.Errorf("worker: jobs stream: %w", err)
	}
	return w.startLeases(ctx)
}

// startConsuming starts the cancel feed, the subscriptions, the catalog
// entries, the consumers and the heartbeats; on error it undoes them.
func (w *Worker) startConsuming(ctx context.Context) error {
	w.runCtx, w.runCancel = context.WithCancelCause(context.Background())
	w.subs, w.watcher, w.feed, w.tenantsW = nil, nil, nil, nil
	w.tenantMu.Lock()
	w.twins, w.pullStopped = map[string][]*tool{}, false
	w.tenantMu.Unlock()
	for _, t := range w.consumers() {
		t.reopen()
	}
	if err := w.startCancelWatch(ctx); err != nil {
		w.abortStart()
		return err
	}
	if err := w.startRateLimits(ctx); err != nil {
		w.abortStart()
		return err
	}
	sub, err := w.nc.Subscribe(w.cfg.Subjects.Cancels(), w.onCancelMsg)
	if err != nil {
		w.abortStart()
		return fmt.Errorf("worker: subscribe cancels: %w", err)
	}
	w.subs = append(w.subs, sub)
	if w.cfg.Tenants {
		if sub, err = w.nc.Subscribe(w.cfg.Subjects.TenantCancels(), w.onCancelMsg); err != nil {
			w.abortStart()
			return fmt.Errorf("worker: subscribe tenant cancels: %w", err)
		}
		w.subs = append(w.subs, sub)
		if err := w.startReplays(); err != nil {
			w.abortStart()
			return err
		}
	}
	adv := w.cfg.Subjects.MaxDeliveriesAdvisories(w.cfg.Subjects.JobsStream())
	if w.cfg.Tenants {
		adv = w.cfg.Subjects.MaxDeliveriesAdvisories("*") // each tenant has a stream
	}
	if sub, err = w.nc.Subscribe(adv, w.onMaxDeliveries); err != nil {
		w.abortStart()
		return fmt.Errorf("worker: subscribe advisories: %w", err)
	}
	w.subs = append(w.subs, sub)

	if err := w.registerCatalog(ctx); err != nil {
		w.abortStart()
		return err
	}
	for _, t := range w.consumers() {
		if err := w.startTool(ctx, t); err != nil {
			w.abortStart()
			return err
		}
	}
	if w.cfg.Tenants {
		if err := w.startTenants(ctx); err != nil {
			w.abortStart()
			return err
		}
	}
	w.loops.Add(1)
	go w.heartbeats()
	if w.catalogRefreshes() {
		w.loops.Add(1)
		go w.refreshCatalog() //nolint:contextcheck // the refresh lives until Stop and uses the worker's run context
	}
	if w.cfg.Observer != nil {
		w.loops.Add(1)
		go w.sampleLag() //nolint:contextcheck // the sampler lives until Stop and uses the worker's run context
	}
	if iv := w.sweepInterval(); iv > 0 {
		w.loops.Add(1)
		go w.sweepUnserved(iv) //nolint:contextcheck // the sweep loop is owned by Start/Stop and uses the worker's run context
	}
	w.loops.Add(1)
	go w.watchConnection(w.nc.StatusChanged(nats.CONNECTED, nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED))
	return nil
}

func (w *Worker) abortStart() {
	w.stopPulling()
	w.runCancel(errShutdown)
	w.loops.Wait()
}

// stop is the lifecycle's stop: drain, cancel what is left, end the loops,
// then stop the extensions.
func (w *Worker) stop(ctx context.Context) error {
	w.mu.Lock()
	w.stopping = true
	exts := w.exts
	w.mu.Unlock()

	w.stopPulling()
	soft, cancel := context.WithTimeout(ctx, w.cfg.StopTimeout)
	defer cancel()
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-soft.Done():
		w.log.Warn("stop: cancelling in-flight jobs")
		w.runCancel(errShutdown)
		<-done
	}
	w.runCancel(errShutdown)
	w.loops.Wait()
	err := w.stopExtensions(context.WithoutCancel(ctx), exts)

	w.mu.Lock()
	w.started = false
	w.mu.Unlock()
	w.log.Info("worker stopped")
	return err
}

func (w *Worker) stopPulling() {
	w.tenantMu.Lock()
	w.pullStopped = true
	if w.tenantsW != nil {
		_ = w.tenantsW.Stop()
	}
	w.tenantMu.Unlock()
	var ccs []*puller
	for _, t := range w.consumers() {
		if cc := w.pause(t, true); cc != nil {
			ccs = append(ccs, cc)
		}
	}
	for _, cc := range ccs {
		<-cc.Closed()
	}
	for _, s := range w.subs {
		_ = s.Unsubscribe()
	}
	if w.watcher != nil {
		_ = w.watcher.Stop()
	}
}

// consumers returns every tool and every tenant twin: each has a consumer.
func (w *Worker) consumers() []*tool {
	w.tenantMu.Lock()
	defer w.tenantMu.Unlock()
	ts := make([]*tool, 0, len(w.tools))
	for _, t := range w.tools {
		if t.cfg.servesTenant("") {
			ts = append(ts, t)
		}
	}
	for _, twins := range w.twins {
		ts = append(ts, twins...)
	}
	return ts
}
