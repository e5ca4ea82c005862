package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/embedded"
	"github.com/toolq/toolq/worker"
)

// Scenarios are the flow-control measurements of `toolq bench --scenario`.
var Scenarios = []string{"fairness", "sessions", "priority", "concurrency", "ratelimit"}

// FlowConfig sizes the flow-control scenarios.
type FlowConfig struct {
	// Backlog is the noisy tenant's queued jobs (fairness) or the normal
	// jobs queued ahead (priority).
	Backlog int
	// Probes is how many of the quiet tenant's jobs are timed.
	Probes int
	// Concurrency is the worker's slots of the tool.
	Concurrency int
	// Duration is how long the ratelimit scenario measures.
	Duration time.Duration
	// Burst is the ratelimit scenario's burst; 1 when 0.
	Burst int
	Phase func(phase string)
}

// FlowDefaults are the sizes the issue names: a backlog of 100,000.
func FlowDefaults() FlowConfig {
	return FlowConfig{Backlog: 100000, Probes: 200, Concurrency: 16, Duration: time.Minute}
}

func (c FlowConfig) phase(format string, args ...any) {
	if c.Phase != nil {
		c.Phase(fmt.Sprintf(format, args...))
	}
}

const flowTool = "bench.flow"

// flowRig is an embedded server and a worker whose flowTool records when
// each job starts; a job's input {"ms":N} makes it last N ms.
type flowRig struct {
	srv *embedded.Server
	js  jetstream.JetStream
	w   *worker.Worker

	mu      sync.Mutex
	started map[string]time.Time
}

func startFlowRig(ctx context.Context, cfg FlowConfig, tenants ...string) (*flowRig, func(), error) {
	return startFlowRigLanes(ctx, cfg, false, tenants...)
}

// startFlowRigLanes is startFlowRig with the worker's session lanes apart
// (lanes) or folded.
func startFlowRigLanes(ctx context.Context, cfg FlowConfig, lanes bool, tenants ...string) (*flowRig, func(), error) {
	srv, stopSrv, err := tempServer("flow")
	if err != nil {
		return nil, nil, err
	}
	r := &flowRig{srv: srv, started: map[string]time.Time{}}
	var closers []func()
	cleanup := func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
		stopSrv()
	}
	nc, err := srv.Connect()
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	closers = append(closers, nc.Close)
	if r.js, err = jetstream.New(nc); err != nil {
		cleanup()
		return nil, nil, err
	}
	w, err := worker.New(nc, &worker.Config{Name: "bench-flow", Logger: slog.New(slog.DiscardHandler), Tenants: len(tenants) > 0, SessionLanes: lanes})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	err = w.Register(flowTool, worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
		r.mu.Lock()
		r.started[job.ID] = time.Now()
		r.mu.Unlock()
		var in struct {
			Ms int `json:"ms"`
		}
		_ = json.Unmarshal(job.Input, &in)
		if in.Ms > 0 {
			select {
			case <-time.After(time.Duration(in.Ms) * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return nil, nil
	}), &worker.ToolConfig{Concurrency: cfg.Concurrency, MaxAckPending: max(4096, cfg.Concurrency)})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	// Tenants before the worker starts, so it serves them from the start.
	for _, t := range tenants {
		rec := contracts.TenantRecord{Name: t, QueueLimit: int64(cfg.Backlog) + int64(cfg.Probes) + 1000}
		if err := bus.AddTenant(ctx, r.js, bus.Config{TenantMaxBytes: 1 << 30}, rec); err != nil {
			cleanup()
			return nil, nil, err
		}
	}
	if err := w.Start(ctx); err != nil {
		cleanup()
		return nil, nil, err
	}
	closers = append(closers, func() { stopWorker(ctx, w) })
	r.w = w
	return r, cleanup, nil
}

// publish queues n jobs of flowTool on subject with ids prefix<i>, and
// returns when each was acknowledged; sent gets the time of each publish.
func (r *flowRig) publish(ctx context.Context, subject, prefix string, n, ms int, sent map[string]time.Time) error {
	const window = 4000 // below jetstream's default PublishAsyncMaxPending (4000), so a publish never stalls
	pending := make([]jetstream.PubAckFuture, 0, window)
	drain := func(keep int) error {
		for len(pending) > keep {
			select {
			case <-pending[0].Ok():
			case err := <-pending[0].Err():
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
			pending = pending[1:]
		}
		return nil
	}
	input := json.RawMessage(fmt.Sprintf(`{"ms":%d}`, ms))
	for i := range n {
		id := fmt.Sprintf("%s%d", prefix, i)
		body, err := json.Marshal(&contracts.Job{ID: id, Tool: flowTool, Session: prefix, Input: input, CreatedAt: time.Now().UTC()})
		if err != nil {
			return err
		}
		if sent != nil {
			sent[id] = time.Now()
		}
		f, err := r.js.PublishAsync(subject, body, jetstream.WithMsgID(id))
		if err != nil {
			return err
		}
		pending = append(pending, f)
		if err := drain(window - 1); err != nil {
			return err
		}
	}
	return drain(0)
}

func (r *flowRig) startedAt(id string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.started[id]
	return t, ok
}

// waitStarted waits until every id has started and returns each one's
// delay from its publish.
func (r *flowRig) waitStarted(ctx context.Context, sent map[string]time.Time) ([]time.Duration, error) {
	delays := make([]time.Duration, 0, len(sent))
	for id, at := range sent {
		for {
			if t, ok := r.startedAt(id); ok {
				delays = append(delays, t.Sub(at))
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("bench: job %s never started: %w", id, ctx.Err())
			case <-time.After(time.Millisecond):
			}
		}
	}
	slices.Sort(delays)
	return delays, nil
}

// waitIdle waits until the worker has started every job it was sent.
func (r *flowRig) waitIdle(ctx context.Context, total int) error {
	for {
		r.mu.Lock()
		n := len(r.started)
		r.mu.Unlock()
		if n >= total {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: %d of %d jobs started: %w", n, total, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// RunScenario runs one flow-control scenario and returns its figures.
func RunScenario(ctx context.Context, name string, cfg FlowConfig) ([]Figure, error) {
	if cfg.Backlog < 1 || cfg.Probes < 1 || cfg.Concurrency < 1 {
		return nil, errors.New("bench: backlog, probes and concurrency must be positive")
	}
	switch name {
	case "fairness":
		return fairness(ctx, cfg)
	case "sessions":
		return sessions(ctx, cfg)
	case "priority":
		return priority(ctx, cfg)
	case "concurrency":
		return concurrency(ctx, cfg)
	case "ratelimit":
		if cfg.Duration < time.Second {
			return nil, errors.New("bench: the ratelimit scenario needs a duration of 1s at least")
		}
		return ratelimit(ctx, cfg)
	}
	return nil, contracts.Errorf(contracts.CodeInvalidInput, "--scenario %q: want one of %v", name, Scenarios)
}

// fairness queues the noisy tenant's backlog, then has the quiet tenant
// submit one job every 5 ms while it drains, and times when each starts.
// Then the same with fairness off: the quiet jobs queued in the noisy
// tenant's own stream (another session), behind its backlog.
func fairness(ctx context.Context, cfg FlowConfig) ([]Figure, error) {
	r, cleanup, err := startFlowRig(ctx, cfg, "NOISY", "QUIET")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	s := contracts.Subjects{}
	var figs []Figure
	total := 0
	for _, off := range []bool{false, true} {
		quiet, label := "QUIET", "fairness"
		if off {
			quiet, label = "NOISY", "fairness_off"
		}
		round := label + "-"
		cfg.phase("%s: the noisy tenant queues %d jobs", label, cfg.Backlog)
		if err := r.publish(ctx, s.TenantJob("NOISY", flowTool), round+"n", cfg.Backlog, 0, nil); err != nil {
			return nil, err
		}
		cfg.phase("%s: the quiet tenant submits %d jobs, one every 5 ms", label, cfg.Probes)
		sent := map[string]time.Time{}
		for i := range cfg.Probes {
			one := map[string]time.Time{}
			if err := r.publish(ctx, s.TenantJob(quiet, flowTool), fmt.Sprintf("%sq%d-", round, i), 1, 0, one); err != nil {
				return nil, err
			}
			for k, v := range one {
				sent[k] = v
			}
			time.Sleep(5 * time.Millisecond)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		delays, err := r.waitStarted(wctx, sent)
		cancel()
		if err != nil {
			return nil, err
		}
		total += cfg.Backlog + cfg.Probes
		figs = append(figs,
			Figure{label + "_quiet_p50_ms", ms(pct(delays, 50)), "ms"},
			Figure{label + "_quiet_p99_ms", ms(pct(delays, 99)), "ms"})
		wctx, cancel = context.WithTimeout(ctx, 10*time.Minute)
		err = r.waitIdle(wctx, total)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	cfg.phase("done")
	return figs, nil
}

// Two sessions of one tenant on different lanes (contracts.LaneOf: "a" is
// on lane 0, "b" on lane 1).
const busySession, quietSession = "a", "b"

// sessions is fairness between two sessions of the default tenant: the busy
// one queues the backlog on its lane, the quiet one submits one job every
// 5 ms on its own while it drains, each on the subject a producer chooses
// for its session. First with the worker's lanes apart, then folded (one
// consumer: the quiet session waits behind the backlog). The quiet session
// is one whose lane differs from the busy one's; a session that hashes to
// the busy one's lane (one in SessionLanes) waits as with lanes off.
func sessions(ctx context.Context, cfg FlowConfig) ([]Figure, error) {
	s := contracts.Subjects{}
	var figs []Figure
	for _, lanes := range []bool{true, false} {
		label := "session_fairness"
		if !lanes {
			label = "session_fairness_off"
		}
		figs2, err := func() ([]Figure, error) {
			r, cleanup, err := startFlowRigLanes(ctx, cfg, lanes)
			if err != nil {
				return nil, err
			}
			defer cleanup()
			cfg.phase("%s: session %s queues %d jobs", label, busySession, cfg.Backlog)
			busy := s.SessionJob(&contracts.Job{Tool: flowTool, Session: busySession})
			if err := r.publish(ctx, busy, label+"-n", cfg.Backlog, 0, nil); err != nil {
				return nil, err
			}
			cfg.phase("%s: session %s submits %d jobs, one every 5 ms", label, quietSession, cfg.Probes)
			quiet := s.SessionJob(&contracts.Job{Tool: flowTool, Session: quietSession})
			sent := map[string]time.Time{}
			for i := range cfg.Probes {
				one := map[string]time.Time{}
				if err := r.publish(ctx, quiet, fmt.Sprintf("%s-q%d-", label, i), 1, 0, one); err != nil {
					return nil, err
				}
				maps.Copy(sent, one)
				time.Sleep(5 * time.Millisecond)
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
			defer cancel()
			delays, err := r.waitStarted(wctx, sent)
			if err != nil {
				return nil, err
			}
			return []Figure{
				{label + "_quiet_p50_ms", ms(pct(delays, 50)), "ms"},
				{label + "_quiet_p99_ms", ms(pct(delays, 99)), "ms"},
			}, nil
		}()
		if err != nil {
			return nil, err
		}
		figs = append(figs, figs2...)
	}
	cfg.phase("done")
	return figs, nil
}

// priority queues a backlog of 2 ms normal jobs, then one high job, and
// times when it starts; then the same with a normal job in its place.
func priority(ctx context.Context, cfg FlowConfig) ([]Figure, error) {
	r, cleanup, err := startFlowRig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	s := contracts.Subjects{}
	var figs []Figure
	total := 0
	for _, p := range []contracts.Priority{contracts.PriorityHigh, contracts.PriorityNormal} {
		label := "priority_high_start_ms"
		if p == contracts.PriorityNormal {
			label = "priority_off_start_ms"
		}
		cfg.phase("%s: %d normal jobs of 2 ms queued, then one at %s", label, cfg.Backlog, p)
		round := string(p) + "-"
		if err := r.publish(ctx, s.Job(flowTool), round+"n", cfg.Backlog, 2, nil); err != nil {
			return nil, err
		}
		sent := map[string]time.Time{}
		if err := r.publish(ctx, s.JobAt(flowTool, p), round+"probe", 1, 0, sent); err != nil {
			return nil, err
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		delays, err := r.waitStarted(wctx, sent)
		cancel()
		if err != nil {
			return nil, err
		}
		figs = append(figs, Figure{label, ms(delays[0]), "ms"})
		total += cfg.Backlog + 1
		wctx, cancel = context.WithTimeout(ctx, 10*time.Minute)
		err = r.waitIdle(wctx, total)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	cfg.phase("done")
	return figs, nil
}

// concurrencyKey is the key of the concurrency scenario's jobs.
const concurrencyKey = "bench-key"

// concurrency runs Backlog jobs of one concurrency key (limit 4) on 8
// workers, each on its own connection, and kills one of them (its
// connection closed, nothing released) a third of the way through. It
// prints the most jobs of the key ever seen running at once, and the
// leases left once everything is done and the dead worker's lease TTL has
// passed.
func concurrency(ctx context.Context, cfg FlowConfig) ([]Figure, error) {
	const (
		workers  = 8
		limit    = 4
		leaseTTL = 2 * time.Second
	)
	srv, done, err := tempServer("conc")
	if err != nil {
		return nil, err
	}
	defer done()
	var (
		mu       sync.Mutex
		now      int
		peak     int
		finished = map[string]bool{}
	)
	handler := worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
		mu.Lock()
		now++
		peak = max(peak, now)
		mu.Unlock()
		defer func() {
			mu.Lock()
			now--
			finished[job.ID] = true
			mu.Unlock()
		}()
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return nil, nil
	})
	var (
		conns []interface{ Close() }
		ws    []*worker.Worker
	)
	defer func() {
		for _, w := range ws {
			stopWorker(ctx, w)
		}
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range workers {
		nc, err := srv.Connect()
		if err != nil {
			return nil, err
		}
		conns = append(conns, nc)
		w, err := worker.New(nc, &worker.Config{
			Name: fmt.Sprintf("bench-conc-%d", i), Logger: slog.New(slog.DiscardHandler),
			ConcurrencyLeaseTTL: leaseTTL, StopTimeout: time.Second,
		})
		if err != nil {
			return nil, err
		}
		if err := w.Register(flowTool, handler, &worker.ToolConfig{Concurrency: 16, AckWait: leaseTTL}); err != nil {
			return nil, err
		}
		if err := w.Start(ctx); err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	nc, err := srv.Connect()
	if err != nil {
		return nil, err
	}
	conns = append(conns, nc)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	cfg.phase("concurrency: %d jobs of one key, limit %d, on %d workers; one killed a third of the way", cfg.Backlog, limit, workers)
	start := time.Now()
	subject := contracts.Subjects{}.Job(flowTool)
	conc := &contracts.ConcurrencyLimit{Key: concurrencyKey, Limit: limit}
	for i := range cfg.Backlog {
		id := fmt.Sprintf("c%d", i)
		body, err := json.Marshal(&contracts.Job{ID: id, Tool: flowTool, Session: "bench-conc", CreatedAt: time.Now().UTC(), Concurrency: conc})
		if err != nil {
			return nil, err
		}
		if _, err := js.PublishAsync(subject, body, jetstream.WithMsgID(id)); err != nil {
			return nil, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	killed := false
	for {
		mu.Lock()
		done := len(finished)
		mu.Unlock()
		if !killed && done >= cfg.Backlog/3 {
			conns[0].Close() // worker 0 dies: its leases and jobs are left to expire
			killed = true
		}
		if done >= cfg.Backlog {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bench: %d of %d jobs done: %w", done, cfg.Backlog, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	// The dead worker's leases expire within the TTL (the server removes
	// expired entries on its own schedule): count what is left after that.
	time.Sleep(leaseTTL + 2*time.Second)
	kv, err := js.KeyValue(ctx, contracts.Subjects{}.ConcurrencyBucket())
	if err != nil {
		return nil, err
	}
	leaks := 0
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	for range keys.Keys() {
		leaks++
	}
	mu.Lock()
	observed := peak
	mu.Unlock()
	cfg.phase("done")
	return []Figure{
		{"concurrency_limit", limit, "jobs"},
		{"concurrency_max_observed", float64(observed), "jobs"},
		{"concurrency_slot_leaks", float64(leaks), "leases"},
		{"concurrency_throughput", float64(cfg.Backlog) / elapsed.Seconds(), "jobs/s"},
	}, nil
}

// ratelimit runs a backlog of noop-like jobs of one tool through 3
// workers under a limit of 50 a second (burst Burst) for Duration, and prints
// the rate their starts kept against it.
func ratelimit(ctx context.Context, cfg FlowConfig) ([]Figure, error) {
	const (
		workers = 3
		rate    = 50
	)
	dur := cfg.Duration
	srv, done, err := tempServer("rate")
	if err != nil {
		return nil, err
	}
	defer done()
	var (
		mu     sync.Mutex
		starts []time.Time
	)
	handler := worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return nil, nil
	})
	nc, err := srv.Connect()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	var ws []*worker.Worker
	defer func() {
		for _, w := range ws {
			stopWorker(ctx, w)
		}
	}()
	for i := range workers {
		wnc, err := srv.Connect()
		if err != nil {
			return nil, err
		}
		defer wnc.Close()
		w, err := worker.New(wnc, &worker.Config{Name: fmt.Sprintf("bench-rate-%d", i), Logger: slog.New(slog.DiscardHandler), StopTimeout: time.Second})
		if err != nil {
			return nil, err
		}
		if err := w.Register(flowTool, handler, &worker.ToolConfig{Concurrency: 16}); err != nil {
			return nil, err
		}
		if err := w.Start(ctx); err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	kv, err := js.KeyValue(ctx, contracts.Subjects{}.LimitsBucket())
	if err != nil {
		return nil, err
	}
	lim := contracts.RateLimit{Tool: flowTool, Rate: rate, Per: time.Second, Burst: max(1, cfg.Burst)}
	data, _ := json.Marshal(lim)
	if _, err := kv.Put(ctx, contracts.RateLimitKey("", flowTool), data); err != nil {
		return nil, err
	}
	time.Sleep(500 * time.Millisecond) // the workers' watches apply it
	n := int(float64(rate)*dur.Seconds()) + rate*5
	cfg.phase("ratelimit: %d jobs, limit %s on %d workers, measured for %s", n, lim.String(), workers, dur)
	r := &flowRig{js: js, started: map[string]time.Time{}}
	if err := r.publish(ctx, contracts.Subjects{}.Job(flowTool), "rl", n, 0, nil); err != nil {
		return nil, err
	}
	// Measure from the first start after a second (the burst and the
	// queue's first fetches are behind), for dur.
	time.Sleep(time.Second)
	mu.Lock()
	from := len(starts)
	mu.Unlock()
	t0 := time.Now()
	select {
	case <-time.After(dur):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	mu.Lock()
	count := len(starts) - from
	mu.Unlock()
	observed := float64(count) / time.Since(t0).Seconds()
	errPct := (observed - rate) / rate * 100
	if errPct < 0 {
		errPct = -errPct
	}
	cfg.phase("done")
	return []Figure{
		{"ratelimit_configured", rate, "jobs/s"},
		{"ratelimit_observed", observed, "jobs/s"},
		{"ratelimit_error_pct", errPct, "%"},
	}, nil
}

// tempServer starts an embedded server on a temporary store for one
// scenario; done stops it and removes the store.
func tempServer(name string) (*embedded.Server, func(), error) {
	dir, err := os.MkdirTemp("", "toolq-bench-"+name+"-")
	if err != nil {
		return nil, nil, err
	}
	srv, err := embedded.Start(&embedded.Config{StoreDir: dir})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, err
	}
	return srv, func() { srv.Stop(); _ = os.RemoveAll(dir) }, nil
}

// stopWorker stops w within 10 s, even once ctx has ended.
func stopWorker(ctx context.Context, w *worker.Worker) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = w.Stop(sctx)
}
