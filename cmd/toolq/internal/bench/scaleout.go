package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

// StartWorker starts one worker process (`toolq worker --builtins`) named
// name against url with the given concurrency and extra flags of the
// worker command, and returns once it consumes.
type StartWorker func(ctx context.Context, url, name string, concurrency int, extra ...string) (*WorkerProcess, error)

// WorkerProcess is a started worker process.
type WorkerProcess struct {
	// Stop ends it (SIGTERM, then its drain) and waits for it.
	Stop func(context.Context) error
	// Kill ends it at once (SIGKILL: nothing released, nothing handed
	// back) and waits for it.
	Kill func() error
	// PID is the process's id (0 if unknown): the bench reads its CPU
	// time.
	PID int
}

// ScaleOutConfig sizes a run against a server of its own process, with the
// workers in processes of their own: the shape a deployment has.
type ScaleOutConfig struct {
	Config
	// URL of the nats-server; Options are the client's (credentials).
	URL     string
	Options []nats.Option
	// Workers lists the worker counts to measure, one throughput run each.
	Workers []int
	// Start starts a worker process.
	Start StartWorker
	// ServerPID is the nats-server's process id when it runs on this
	// host (0: unknown): its CPU is then split out of the rest.
	ServerPID int
}

// RunScaleOut measures end-to-end throughput (and latency, with
// LatencyJobs) with N worker processes for each N of cfg.Workers, the
// requester in this process. Figures are named <figure>_workers_<N>.
func RunScaleOut(ctx context.Context, cfg ScaleOutConfig) ([]Figure, error) {
	if cfg.Jobs < 1 || cfg.Submitters < 1 || cfg.Concurrency < 1 || cfg.LatencyJobs < 0 || len(cfg.Workers) == 0 || cfg.Start == nil || cfg.URL == "" {
		return nil, errors.New("bench: scale-out needs a URL, worker counts, a way to start workers and positive sizes")
	}
	for _, n := range cfg.Workers {
		if n < 1 || n > 64 {
			return nil, fmt.Errorf("bench: %d workers: want 1 to 64", n)
		}
	}
	nc, err := nats.Connect(cfg.URL, cfg.Options...)
	if err != nil {
		return nil, fmt.Errorf("bench: connect %s: %w", cfg.URL, err)
	}
	defer nc.Close()
	p, err := producer.New(nc, &producer.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	payload, _ := json.Marshal(map[string]string{"pad": pad(cfg.PayloadBytes)})
	var figs []Figure
	for _, n := range cfg.Workers {
		f, err := scaleOutRound(ctx, cfg, p, js, n, payload)
		if err != nil {
			return nil, err
		}
		figs = append(figs, f...)
	}
	cfg.phase("done")
	return figs, nil
}

func scaleOutRound(ctx context.Context, cfg ScaleOutConfig, p *producer.Producer, js jetstream.JetStream, n int, payload json.RawMessage) (_ []Figure, err error) {
	cfg.phase("starting %d worker processes (concurrency %d each)", n, cfg.Concurrency)
	var (
		stops []func(context.Context) error
		pids  []int
	)
	defer func() {
		cfg.phase("stopping %d worker processes", len(stops))
		for _, stop := range stops {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			err = errors.Join(err, stop(sctx))
			cancel()
		}
	}()
	for i := range n {
		wp, err := cfg.Start(ctx, cfg.URL, fmt.Sprintf("bench-%d-of-%d", i+1, n), cfg.Concurrency)
		if err != nil {
			return nil, err
		}
		stops = append(stops, wp.Stop)
		pids = append(pids, wp.PID)
	}
	redeliveredBefore := redelivered(ctx, js)
	cfg.phase("warming up: 50 jobs")
	if _, err := latency(ctx, p, payload, 50, 0); err != nil {
		return nil, err
	}
	cfg.phase("throughput: %d jobs from %d submitters, %d workers", cfg.Jobs, cfg.Submitters, n)
	before := sampleCPU(pids, cfg.ServerPID)
	tf, err := throughput(ctx, p, cfg.Config, payload)
	if err != nil {
		return nil, err
	}
	suffix := fmt.Sprintf("_workers_%d", n)
	var figs []Figure
	for _, f := range append(tf, sampleCPU(pids, cfg.ServerPID).since(before, cfg.Jobs)...) {
		f.Name += suffix
		figs = append(figs, f)
	}
	if cfg.LatencyJobs > 0 {
		cfg.phase("latency: %d jobs, one every %s", cfg.LatencyJobs, cfg.LatencyInterval)
		lf, err := latencyFigures(ctx, p, payload, cfg.Config, suffix)
		if err != nil {
			return nil, err
		}
		figs = append(figs, lf...)
	}
	figs = append(figs, Figure{"redelivered" + suffix, float64(redelivered(ctx, js) - redeliveredBefore), "jobs"})
	return figs, nil
}

// redelivered is the noop consumer's count of redelivered messages (0
// before the consumer exists).
func redelivered(ctx context.Context, js jetstream.JetStream) int {
	s := contracts.Subjects{}
	c, err := js.Consumer(ctx, s.JobsStream(), s.ConsumerName(worker.ToolNoop))
	if err != nil {
		return 0
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return 0
	}
	return ci.NumRedelivered
}

// cpuSample is where the CPU went, at one time: the machine's cores, this
// process (the requester), the worker processes and the server's.
type cpuSample struct {
	busy, total        time.Duration
	requester, workers time.Duration
	server             time.Duration
	ok, serverOK       bool
}

// sampleCPU reads the machine's and the processes' CPU times (ok is false
// where they cannot be read: not Linux, a worker gone; serverOK is false
// without a server pid).
func sampleCPU(pids []int, serverPID int) cpuSample {
	s := cpuSample{requester: processCPU()}
	s.busy, s.total, s.ok = machineCPU()
	for _, pid := range pids {
		c, ok := pidCPU(pid)
		s.ok = s.ok && ok
		s.workers += c
	}
	if serverPID > 0 {
		s.server, s.serverOK = pidCPU(serverPID)
	}
	return s
}

// since gives the CPU spent per job from s0 to s over jobs jobs, split
// into the requester (this process), the worker processes and the rest of
// the nats-server (when its pid is known) and the rest of the machine
// (the server when it is not, and whatever else runs), and how busy the
// cores were: what explains a curve that stops rising with more workers.
func (s cpuSample) since(s0 cpuSample, jobs int) []Figure {
	if !s.ok || !s0.ok || jobs < 1 || s.total <= s0.total {
		return nil
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(jobs) }
	req, wk, busy := s.requester-s0.requester, s.workers-s0.workers, s.busy-s0.busy
	figs := []Figure{
		{"cpu_per_job_requester", per(req), "µs"},
		{"cpu_per_job_workers", per(wk), "µs"},
	}
	rest := busy - req - wk
	if s.serverOK && s0.serverOK {
		srv := s.server - s0.server
		figs = append(figs, Figure{"cpu_per_job_server", per(srv), "µs"})
		rest -= srv
	}
	return append(figs,
		Figure{"cpu_per_job_rest", per(max(rest, 0)), "µs"},
		Figure{"cpu_busy", 100 * float64(busy) / float64(s.total-s0.total), "%"})
}
