package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

// ProcessScenarios are the scenarios RunScenarioProcesses runs.
var ProcessScenarios = []string{"concurrency", "ratelimit"}

// FlowProcConfig runs a flow-control scenario the way a deployment is
// shaped: a server of its own process (URL) and the workers in processes
// of their own (`toolq worker --builtins`, started by Start). What the
// scenario measures it reads from the jobs' events (each job asks for
// progress, so its `running` event is its start, stamped by its worker).
type FlowProcConfig struct {
	FlowConfig
	// URL of the nats-server; Options are the client's (credentials);
	// Prefix the subjects' (the workers get the same).
	URL     string
	Options []nats.Option
	Prefix  string
	// Workers is the number of worker processes; 0 is the scenario's own
	// (8 for concurrency, 3 for ratelimit).
	Workers int
	// Start starts a worker process.
	Start StartWorker
}

// RunScenarioProcesses runs the concurrency or ratelimit scenario with
// worker processes. In the concurrency scenario one worker process is
// killed with SIGKILL a third of the way through.
func RunScenarioProcesses(ctx context.Context, name string, cfg FlowProcConfig) ([]Figure, error) {
	if cfg.URL == "" || cfg.Start == nil {
		return nil, errors.New("bench: a scenario with worker processes needs a server URL and a way to start workers")
	}
	if cfg.Backlog < 1 || cfg.Concurrency < 1 || cfg.Workers < 0 || cfg.Workers > 64 {
		return nil, errors.New("bench: backlog and concurrency must be positive, workers 1 to 64")
	}
	switch name {
	case "concurrency":
		if cfg.Workers == 1 {
			return nil, errors.New("bench: the concurrency scenario kills a worker: it needs 2 workers at least")
		}
		return concurrencyProcs(ctx, cfg)
	case "ratelimit":
		if cfg.Duration < time.Second {
			return nil, errors.New("bench: the ratelimit scenario needs a duration of 1s at least")
		}
		return ratelimitProcs(ctx, cfg)
	}
	return nil, contracts.Errorf(contracts.CodeInvalidInput, "--scenario %q with --workers: want one of %v", name, ProcessScenarios)
}

// procRig is a connection to the scenario's server, its worker processes
// and a record of its session's events.
type procRig struct {
	cfg     FlowProcConfig
	subj    contracts.Subjects
	js      jetstream.JetStream
	prod    *producer.Producer
	session string
	procs   []*WorkerProcess
	dead    map[int]bool

	mu    sync.Mutex
	runs  map[string]*procRun // by <job>/<attempt>
	ended map[string]int      // job → the attempt that ended it
	grew  chan struct{}       // signalled at each ended job
}

type procRun struct{ start, end time.Time }

func startProcRig(ctx context.Context, cfg FlowProcConfig, name string, workers int, extra ...string) (_ *procRig, stop func(), err error) {
	nc, err := nats.Connect(cfg.URL, cfg.Options...)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: connect %s: %w", cfg.URL, err)
	}
	r := &procRig{
		cfg: cfg, subj: contracts.Subjects{Prefix: cfg.Prefix}, dead: map[int]bool{},
		session: fmt.Sprintf("bench-%s-%d", name, time.Now().UnixNano()),
		runs:    map[string]*procRun{}, ended: map[string]int{}, grew: make(chan struct{}, 1),
	}
	stop = func() {
		cfg.phase("stopping %d worker processes", len(r.procs)-len(r.dead))
		for i, p := range r.procs {
			if r.dead[i] {
				continue
			}
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			if err := p.Stop(sctx); err != nil {
				cfg.phase("%v", err)
			}
			cancel()
		}
		if r.prod != nil {
			r.prod.Close()
		}
		nc.Close()
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	if r.js, err = jetstream.New(nc); err != nil {
		return nil, nil, err
	}
	if r.prod, err = producer.New(nc, &producer.Config{Subjects: r.subj, Session: r.session, Logger: slog.New(slog.DiscardHandler)}); err != nil {
		return nil, nil, err
	}
	cfg.phase("starting %d worker processes (concurrency %d each)", workers, cfg.Concurrency)
	for i := range workers {
		p, err := cfg.Start(ctx, cfg.URL, fmt.Sprintf("bench-%s-%d", name, i+1), cfg.Concurrency, extra...)
		if err != nil {
			return nil, nil, err
		}
		r.procs = append(r.procs, p)
	}
	return r, stop, nil
}

// follow records the session's events until ctx ends: each attempt's
// start (its running event) and end (its terminal event).
func (r *procRig) follow(ctx context.Context) <-chan error {
	out := make(chan error, 1)
	go func() {
		err := r.prod.ReadEvents(ctx, r.session, &producer.ReadOpts{Follow: true}, func(ev *contracts.Event) error {
			k := fmt.Sprintf("%s/%d", ev.Data.JobID, ev.Data.Attempt)
			r.mu.Lock()
			defer r.mu.Unlock()
			run := r.runs[k]
			if run == nil {
				run = &procRun{}
				r.runs[k] = run
			}
			switch {
			case ev.Data.Status == contracts.StatusRunning:
				run.start = ev.Time
			case ev.Data.Status.Terminal():
				run.end = ev.Time
				if _, ok := r.ended[ev.Data.JobID]; !ok {
					r.ended[ev.Data.JobID] = ev.Data.Attempt
					select {
					case r.grew <- struct{}{}:
					default:
					}
				}
			}
			return nil
		})
		if ctx.Err() != nil {
			err = nil
		}
		out <- err
	}()
	return out
}

func (r *procRig) endedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ended)
}

// waitEnded waits until n jobs ended, calling at (if set) once when the
// count first reaches atN.
func (r *procRig) waitEnded(ctx context.Context, n, atN int, at func() error) error {
	for {
		done := r.endedCount()
		if at != nil && done >= atN {
			if err := at(); err != nil {
				return err
			}
			at = nil
		}
		if done >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: %d of %d jobs ended: %w", done, n, ctx.Err())
		case <-r.grew:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// publish queues n jobs of tool with input, each asking for progress and
// carrying conc, under ids <session>-<i>.
func (r *procRig) publish(ctx context.Context, tool string, n int, input json.RawMessage, conc *contracts.ConcurrencyLimit) error {
	subject := r.subj.Job(tool)
	for i := range n {
		id := fmt.Sprintf("%s-%d", r.session, i)
		body, err := json.Marshal(&contracts.Job{
			ID: id, Tool: tool, Session: r.session, Input: input, Progress: true,
			CreatedAt: time.Now().UTC(), Concurrency: conc,
		})
		if err != nil {
			return err
		}
		if _, err := r.js.PublishAsync(subject, body, jetstream.WithMsgID(id)); err != nil {
			return err
		}
		if i%4096 == 4095 {
			select {
			case <-r.js.PublishAsyncComplete():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	select {
	case <-r.js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// maxOverlap is the most attempts running at once, from the attempts with
// both a start and an end (an attempt killed with its worker has none).
func (r *procRig) maxOverlap() int {
	type edge struct {
		at time.Time
		d  int
	}
	r.mu.Lock()
	edges := make([]edge, 0, 2*len(r.runs))
	for _, run := range r.runs {
		if run.start.IsZero() || run.end.IsZero() {
			continue
		}
		edges = append(edges, edge{run.start, 1}, edge{run.end, -1})
	}
	r.mu.Unlock()
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d // an end before a start at the same instant
	})
	now, peak := 0, 0
	for _, e := range edges {
		now += e.d
		peak = max(peak, now)
	}
	return peak
}

// concurrencyProcs: cfg.Backlog sleep jobs of 1 ms of one concurrency key
// with limit 4 on 8 worker processes; one process is killed with SIGKILL
// a third of the way through (its lease and its jobs are left to expire:
// lease TTL and ack wait 2 s). It prints the most attempts seen running at
// once (from their running and terminal events) and the key's leases left
// once everything ended and the TTL passed.
func concurrencyProcs(ctx context.Context, cfg FlowProcConfig) ([]Figure, error) {
	const (
		limit    = 4
		leaseTTL = 2 * time.Second
	)
	workers := cfg.Workers
	if workers == 0 {
		workers = 8
	}
	r, stop, err := startProcRig(ctx, cfg, "conc", workers, "--ack-wait", leaseTTL.String(), "--concurrency-lease-ttl", leaseTTL.String())
	if err != nil {
		return nil, err
	}
	defer stop()
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	followed := r.follow(fctx)
	key := r.session
	cfg.phase("concurrency: %d jobs of one key, limit %d, on %d worker processes; one killed (SIGKILL) a third of the way", cfg.Backlog, limit, workers)
	start := time.Now()
	if err := r.publish(ctx, worker.ToolSleep, cfg.Backlog, json.RawMessage(`{"ms":1}`), &contracts.ConcurrencyLimit{Key: key, Limit: limit}); err != nil {
		return nil, err
	}
	kill := func() error {
		cfg.phase("killing worker process 1 (SIGKILL) after %d jobs", r.endedCount())
		r.dead[0] = true
		return r.procs[0].Kill()
	}
	if err := r.waitEnded(ctx, cfg.Backlog, cfg.Backlog/3, kill); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-followed; err != nil {
		return nil, fmt.Errorf("bench: events: %w", err)
	}
	// The dead worker's leases expire within the TTL (the server removes
	// expired entries on its own schedule): count what is left after that.
	cfg.phase("waiting %s for the dead worker's leases to expire", leaseTTL+2*time.Second)
	select {
	case <-time.After(leaseTTL + 2*time.Second):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	kv, err := r.js.KeyValue(ctx, r.subj.ConcurrencyBucket())
	if err != nil {
		return nil, err
	}
	leaks := 0
	keys, err := kv.ListKeysFiltered(ctx, "d."+key+".>") // the key's leases (contracts.ConcurrencyLeaseKey)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, err
	}
	if keys != nil {
		for range keys.Keys() {
			leaks++
		}
	}
	redone := 0
	r.mu.Lock()
	for _, a := range r.ended {
		if a > 1 {
			redone++
		}
	}
	r.mu.Unlock()
	cfg.phase("done")
	return []Figure{
		{"concurrency_limit", limit, "jobs"},
		{"concurrency_max_observed", float64(r.maxOverlap()), "jobs"},
		{"concurrency_slot_leaks", float64(leaks), "leases"},
		{"concurrency_throughput", float64(cfg.Backlog) / elapsed.Seconds(), "jobs/s"},
		{"concurrency_worker_processes", float64(workers), "processes"},
		{"concurrency_jobs_retried", float64(redone), "jobs"},
	}, nil
}

// ratelimitProcs: noop jobs under a limit of 50 a second (burst Burst) on 3
// worker processes, measured for Duration from the starts their running
// events stamp; the limit is removed afterwards and the rest drained.
func ratelimitProcs(ctx context.Context, cfg FlowProcConfig) ([]Figure, error) {
	const rate = 50
	workers := cfg.Workers
	if workers == 0 {
		workers = 3
	}
	r, stop, err := startProcRig(ctx, cfg, "rate", workers)
	if err != nil {
		return nil, err
	}
	defer stop()
	kv, err := r.js.KeyValue(ctx, r.subj.LimitsBucket())
	if err != nil {
		return nil, err
	}
	lim := contracts.RateLimit{Tool: worker.ToolNoop, Rate: rate, Per: time.Second, Burst: max(1, cfg.Burst)}
	data, _ := json.Marshal(lim)
	if _, err := kv.Put(ctx, lim.LimitKey(), data); err != nil {
		return nil, err
	}
	removed := false
	unlimit := func() {
		if !removed {
			removed = true
			_ = kv.Delete(context.WithoutCancel(ctx), lim.LimitKey())
		}
	}
	defer unlimit()
	time.Sleep(500 * time.Millisecond) // the workers' watches apply it
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	followed := r.follow(fctx)
	dur := cfg.Duration
	n := int(float64(rate)*dur.Seconds()) + rate*5
	cfg.phase("ratelimit: %d jobs, limit %s on %d worker processes, measured for %s", n, lim.String(), workers, dur)
	if err := r.publish(ctx, worker.ToolNoop, n, json.RawMessage(`{}`), nil); err != nil {
		return nil, err
	}
	// Measure from a second after the first starts (the burst and the
	// queue's first fetches are behind), for dur, by the workers' stamps.
	time.Sleep(time.Second)
	t0 := time.Now()
	select {
	case <-time.After(dur):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	t1 := time.Now()
	unlimit()
	cfg.phase("draining the rest without the limit")
	if err := r.waitEnded(ctx, n, 0, nil); err != nil {
		return nil, err
	}
	cancel()
	if err := <-followed; err != nil {
		return nil, fmt.Errorf("bench: events: %w", err)
	}
	count := 0
	r.mu.Lock()
	for _, run := range r.runs {
		if !run.start.Before(t0) && run.start.Before(t1) {
			count++
		}
	}
	r.mu.Unlock()
	observed := float64(count) / t1.Sub(t0).Seconds()
	errPct := (observed - rate) / rate * 100
	if errPct < 0 {
		errPct = -errPct
	}
	cfg.phase("done")
	return []Figure{
		{"ratelimit_configured", rate, "jobs/s"},
		{"ratelimit_observed", observed, "jobs/s"},
		{"ratelimit_error_pct", errPct, "%"},
		{"ratelimit_burst", float64(lim.Burst), "jobs"},
		{"ratelimit_worker_processes", float64(workers), "processes"},
	}, nil
}
