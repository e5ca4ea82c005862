// Package bench measures toolq end to end on an embedded server: noop jobs
// submitted by a producer, run by a worker, and their completion events
// received back by the producer.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/embedded"
	"github.com/toolq/toolq/metrics"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/tracing"
	"github.com/toolq/toolq/tracing/otlptest"
	"github.com/toolq/toolq/worker"
)

// Config sizes a run.
type Config struct {
	// Jobs is the number of noop jobs of the throughput run.
	Jobs int
	// Submitters is the number of goroutines submitting.
	Submitters int
	// Concurrency is the worker's noop concurrency.
	Concurrency int
	// LatencyJobs is the number of jobs of the latency run, submitted one at
	// a time every LatencyInterval.
	LatencyJobs     int
	LatencyInterval time.Duration
	// PayloadBytes is the size of each job's input.
	PayloadBytes int
	// StoreDir holds the server's data; a temporary directory when empty.
	StoreDir string
	// Tenants runs the jobs through a tenant's account: the server gets a
	// TOOLQ account and one tenant account importing its own subspace, as
	// in deploy/nats/tenants.conf, the worker serves tenants, and the
	// producer connects as the tenant's agent (Config.TenantAccount), so
	// every submit, result and event crosses the imports.
	Tenants bool
	// Metrics runs the worker with its Prometheus observer on
	// (worker.Config.Observer) and gathers the registry every second, as a
	// scraper would, so the figures show what metrics cost.
	Metrics bool
	// Tracing runs the worker with OpenTelemetry tracing on (package
	// tracing, every trace sampled), exporting over OTLP/HTTP to a
	// receiver on the loopback interface that reads and discards each
	// export, as a collector elsewhere would cost this machine nothing.
	Tracing bool
	// TraceSampleRatio is the tracer's sample ratio with Tracing; 0 means
	// 1 (every trace).
	TraceSampleRatio float64
	// ThroughputOnly leaves out the latency and batch-submit phases: the
	// rounds of an on/off comparison measure throughput alone.
	ThroughputOnly bool
	// BatchWindow is SubmitBatch's publish window in the batch-submit
	// phase; 0 leaves SubmitBatch's default.
	BatchWindow int
	// CPUProfile, when set, receives a CPU profile of the throughput phase
	// (pprof format); BatchCPUProfile one of the batch-submit phase. They
	// show where a job's CPU goes in the worker, the requester and the
	// embedded server, all in this process.
	CPUProfile      io.Writer
	BatchCPUProfile io.Writer
	// Phase, when set, is told each phase as it begins (toolq bench prints
	// them on stderr: a run takes a while).
	Phase func(phase string)
}

func (c Config) phase(format string, args ...any) {
	if c.Phase != nil {
		c.Phase(fmt.Sprintf(format, args...))
	}
}

// Defaults returns the configuration `toolq bench` uses.
func Defaults() Config {
	return Config{Jobs: 50000, Submitters: 32, Concurrency: 256, LatencyJobs: 2000, LatencyInterval: 2 * time.Millisecond, PayloadBytes: 128}
}

// Figure is one measured value.
type Figure struct {
	Name  string
	Value float64
	Unit  string
}

// String formats the figure as `bench.<name> <value> <unit>`.
func (f Figure) String() string {
	return fmt.Sprintf("bench.%s %s %s", f.Name, trim(f.Value), f.Unit)
}

func trim(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// Run starts an embedded server and a worker, runs the throughput and the
// latency measurements and returns their figures.
func Run(ctx context.Context, cfg Config) ([]Figure, error) {
	if cfg.Jobs < 1 || cfg.Submitters < 1 || cfg.Concurrency < 1 || cfg.LatencyJobs < 0 {
		return nil, errors.New("bench: jobs, submitters and concurrency must be positive")
	}
	var err error
	dir := cfg.StoreDir
	if dir == "" {
		d, err := os.MkdirTemp("", "toolq-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	cfg.phase("starting an embedded server and a worker (concurrency %d, tenants %v)", cfg.Concurrency, cfg.Tenants)
	ecfg := &embedded.Config{StoreDir: dir}
	var tenant *benchTenant
	if cfg.Tenants {
		if tenant, err = newBenchTenant(dir); err != nil {
			return nil, err
		}
		ecfg.ConfigFile = tenant.configFile
	}
	srv, err := embedded.Start(ecfg)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	quiet := slog.New(slog.DiscardHandler)

	wnc, err := srv.Connect(tenant.workerAuth()...)
	if err != nil {
		return nil, err
	}
	defer wnc.Close()
	if tenant != nil {
		wjs, err := jetstream.New(wnc)
		if err != nil {
			return nil, err
		}
		if err := bus.AddTenant(ctx, wjs, bus.Config{}, contracts.TenantRecord{Name: benchTenantName, QueueLimit: int64(cfg.Jobs) + 1000}); err != nil {
			return nil, err
		}
	}
	wcfg := &worker.Config{Name: "bench", Logger: quiet, Builtins: true, Tenants: cfg.Tenants, Tool: worker.ToolConfig{Concurrency: cfg.Concurrency, MaxAckPending: max(4096, cfg.Concurrency)}}
	if cfg.Metrics {
		reg := prometheus.NewRegistry()
		m, err := metrics.New(reg, nil)
		if err != nil {
			return nil, err
		}
		wcfg.Observer = m.Worker()
		stop := gatherEvery(reg, time.Second)
		defer stop()
	}
	var exports func() int // export requests so far
	if cfg.Tracing {
		recv := otlptest.NewDiscard()
		defer recv.Close()
		ratio := cfg.TraceSampleRatio
		if ratio == 0 {
			ratio = 1
		}
		tr, err := tracing.New(ctx, &tracing.Config{Endpoint: recv.URL(), Protocol: tracing.ProtocolHTTP, SampleRatio: ratio})
		if err != nil {
			return nil, err
		}
		defer func() { _ = tr.Shutdown(context.WithoutCancel(ctx)) }()
		wcfg.Tracer = tr
		exports = func() int {
			_ = tr.ForceFlush(ctx)
			return recv.Requests()
		}
	}
	w, err := worker.New(wnc, wcfg)
	if err != nil {
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()
	pnc, err := srv.Connect(tenant.agentAuth()...)
	if err != nil {
		return nil, err
	}
	defer pnc.Close()
	p, err := producer.New(pnc, &producer.Config{Logger: quiet, TenantAccount: tenant != nil})
	if err != nil {
		return nil, err
	}
	defer p.Close()

	payload, _ := json.Marshal(map[string]string{"pad": pad(cfg.PayloadBytes)})
	var figs []Figure
	// Warm up: the first jobs pay for consumer and follower creation.
	cfg.phase("warming up: 50 jobs")
	if _, err := latency(ctx, p, payload, 50, 0); err != nil {
		return nil, err
	}
	cfg.phase("throughput: %d jobs from %d submitters", cfg.Jobs, cfg.Submitters)
	cpu0 := processCPU()
	stopProfile, err := startProfile(cfg.CPUProfile)
	if err != nil {
		return nil, err
	}
	tf, err := throughput(ctx, p, cfg, payload)
	stopProfile()
	if err != nil {
		return nil, err
	}
	figs = append(figs, tf...)
	// The CPU the whole process (server, worker, requester) spent a job:
	// the cost of a feature on a machine whose other load moves the
	// throughput more than the feature does.
	figs = append(figs, Figure{"cpu_per_job", float64((processCPU() - cpu0).Nanoseconds()) / 1000 / float64(cfg.Jobs), "us"})
	if exports != nil {
		// The spans did leave: the receiver answered this many exports.
		figs = append(figs, Figure{"trace_exports", float64(exports()), "count"})
	}
	// Health of the run: jobs JetStream had to redeliver and connections the
	// server had to drop messages to; both should be 0.
	if vz, err := srv.Varz(nil); err == nil {
		figs = append(figs, Figure{"slow_consumers", float64(vz.SlowConsumers), "count"})
	}
	stream := contracts.Subjects{}.JobsStream()
	if tenant != nil {
		stream = contracts.Subjects{}.TenantJobsStream(benchTenantName)
	}
	if js, err := jetstream.New(wnc); err == nil {
		if c, err := js.Consumer(ctx, stream, contracts.Subjects{}.ConsumerName(worker.ToolNoop)); err == nil {
			if ci, err := c.Info(ctx); err == nil {
				figs = append(figs, Figure{"redelivered", float64(ci.NumRedelivered), "jobs"})
			}
		}
	}
	if cfg.ThroughputOnly {
		cfg.phase("done")
		return figs, nil
	}
	if cfg.LatencyJobs > 0 {
		cfg.phase("latency: %d jobs, one every %s", cfg.LatencyJobs, cfg.LatencyInterval)
		lf, err := latencyFigures(ctx, p, payload, cfg, "")
		if err != nil {
			return nil, err
		}
		figs = append(figs, lf...)
	}
	// Last, as the worker works the backlog off afterwards: a pipeline's
	// bulk submit (SubmitBatch, an async publish window), submit side only.
	cfg.phase("batch submit: %d jobs", cfg.Jobs)
	stopProfile, err = startProfile(cfg.BatchCPUProfile)
	if err != nil {
		return nil, err
	}
	rate, err := batchSubmit(ctx, p, cfg.Jobs, cfg.BatchWindow, payload)
	stopProfile()
	if err != nil {
		return nil, err
	}
	figs = append(figs, Figure{"batch_submit_rate", rate, "jobs/s"})
	cfg.phase("done")
	return figs, nil
}

// startProfile starts a CPU profile into w, when w is set, and returns
// what stops it.
func startProfile(w io.Writer) (stop func(), err error) {
	if w == nil {
		return func() {}, nil
	}
	if err := pprof.StartCPUProfile(w); err != nil {
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	return pprof.StopCPUProfile, nil
}

// batchSubmit submits n noop jobs with SubmitBatch and returns the rate
// at which the bus acknowledged them.
func batchSubmit(ctx context.Context, p *producer.Producer, n, window int, payload json.RawMessage) (float64, error) {
	session := "batch-" + fmt.Sprint(time.Now().UnixNano())
	jobs := make([]*contracts.Job, n)
	for i := range jobs {
		jobs[i] = &contracts.Job{ID: fmt.Sprintf("%s-%d", session, i), Tool: worker.ToolNoop, Session: session, Input: payload}
	}
	start := time.Now()
	res, err := p.SubmitBatch(ctx, jobs, &producer.BatchOpts{Window: window})
	if err != nil {
		return 0, err
	}
	if res.Submitted != n {
		return 0, fmt.Errorf("bench: batch submit: %d of %d taken (%d duplicates, %d failed)", res.Submitted, n, res.Duplicates, res.Failed)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func pad(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'x'
	}
	return string(b)
}

// stallLimit is how long a throughput run waits for its next completion.
const stallLimit = 2 * time.Minute

// throughput submits cfg.Jobs noop jobs from cfg.Submitters goroutines in a
// session of their own and counts their completion events as the producer
// receives them.
func throughput(ctx context.Context, p *producer.Producer, cfg Config, payload json.RawMessage) ([]Figure, error) {
	session := "bench-" + fmt.Sprint(time.Now().UnixNano())
	var done atomic.Int64
	all := make(chan struct{})
	var seen sync.Map
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	readErr := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		close(ready)
		readErr <- p.ReadEvents(rctx, session, &producer.ReadOpts{Follow: true}, func(ev *contracts.Event) error {
			if ev.Data.Status.Terminal() {
				if _, dup := seen.LoadOrStore(ev.Data.JobID, true); !dup && done.Add(1) == int64(cfg.Jobs) {
					close(all)
					return producer.ErrStop
				}
			}
			return nil
		})
	}()
	<-ready
	start := time.Now()
	var g errgroup.Group
	per := cfg.Jobs / cfg.Submitters
	for s := range cfg.Submitters {
		n := per
		if s == 0 {
			n += cfg.Jobs % cfg.Submitters
		}
		g.Go(func() error {
			for range n {
				if _, err := p.Submit(ctx, worker.ToolNoop, payload, &producer.SubmitOpts{Session: session}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	submitted := time.Since(start)
	// A completion that never comes would hold the run forever: after
	// stallLimit without one, the run fails and says how far it got.
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, lastAt := done.Load(), time.Now()
	for finished := false; !finished; {
		select {
		case <-tick.C:
			if n := done.Load(); n != last {
				last, lastAt = n, time.Now()
			} else if time.Since(lastAt) > stallLimit {
				return nil, fmt.Errorf("bench: no completion for %s, %d of %d received", stallLimit, n, cfg.Jobs)
			}
		case <-all:
			finished = true
		case err := <-readErr:
			// The reader stops itself (nil) right after it closes all: then
			// both are ready and either may be picked.
			select {
			case <-all:
				finished = true
			default:
				return nil, fmt.Errorf("bench: events ended after %d of %d completions: %w", done.Load(), cfg.Jobs, errors.Join(err, errors.New("reader stopped")))
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("bench: %d of %d completions received: %w", done.Load(), cfg.Jobs, ctx.Err())
		}
	}
	elapsed := time.Since(start)
	return []Figure{
		{"e2e_throughput", float64(cfg.Jobs) / elapsed.Seconds(), "jobs/s"},
		{"submit_rate", float64(cfg.Jobs) / submitted.Seconds(), "jobs/s"},
	}, nil
}

// latencyFigures runs the latency measurement of cfg and returns its p50
// and p99, their names ending in suffix.
func latencyFigures(ctx context.Context, p *producer.Producer, payload json.RawMessage, cfg Config, suffix string) ([]Figure, error) {
	lat, err := latency(ctx, p, payload, cfg.LatencyJobs, cfg.LatencyInterval)
	if err != nil {
		return nil, err
	}
	slices.Sort(lat)
	return []Figure{
		{"e2e_latency_p50" + suffix, ms(pct(lat, 50)), "ms"},
		{"e2e_latency_p99" + suffix, ms(pct(lat, 99)), "ms"},
	}, nil
}

// latency submits n jobs one at a time, every interval, and times each from
// submit to its completion event.
func latency(ctx context.Context, p *producer.Producer, payload json.RawMessage, n int, interval time.Duration) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		job, err := p.Submit(ctx, worker.ToolNoop, payload, nil)
		if err != nil {
			return nil, err
		}
		ev, err := p.Await(ctx, job.Session, job.ID, nil)
		if err != nil {
			return nil, err
		}
		if ev.Data.Status != contracts.StatusCompleted {
			return nil, fmt.Errorf("bench: job %s %s", job.ID, ev.Data.Status)
		}
		out = append(out, time.Since(start))
		if interval > 0 {
			time.Sleep(interval)
		}
	}
	return out, nil
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// gatherEvery gathers reg every period, as a scraper would, until the
// returned stop is called.
func gatherEvery(reg prometheus.Gatherer, period time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				_, _ = reg.Gather()
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
