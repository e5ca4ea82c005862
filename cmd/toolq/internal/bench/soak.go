package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

// Soak runs throughput rounds of cfg.Jobs noop jobs back to back for d on
// one embedded server and worker, and after each round samples the heap in
// use (after a collection) and the goroutines of the process. It prints
// the slope of each after the warm-up (the first half, at most 5 min; a
// least-squares line, per minute),
// the jobs JetStream redelivered, and the throughput.
func Soak(ctx context.Context, cfg Config, d time.Duration) ([]Figure, error) {
	if cfg.Jobs < 1 || cfg.Submitters < 1 || cfg.Concurrency < 1 || d <= 0 {
		return nil, errors.New("bench: soak needs jobs, submitters, concurrency and a duration")
	}
	srv, done, err := tempServer("soak")
	if err != nil {
		return nil, err
	}
	defer done()
	quiet := slog.New(slog.DiscardHandler)
	wnc, err := srv.Connect()
	if err != nil {
		return nil, err
	}
	defer wnc.Close()
	// Events are kept 2 minutes (the duplicate window), not a day: the embedded server's memory for
	// retained events (a subject each) would otherwise grow for the whole
	// run and hide the process's own slope.
	w, err := worker.New(wnc, &worker.Config{
		Name: "bench-soak", Logger: quiet, Builtins: true, EventsMaxAge: 2 * time.Minute,
		Tool: worker.ToolConfig{Concurrency: cfg.Concurrency, MaxAckPending: max(4096, cfg.Concurrency)},
	})
	if err != nil {
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	defer stopWorker(ctx, w)
	pnc, err := srv.Connect()
	if err != nil {
		return nil, err
	}
	defer pnc.Close()
	p, err := producer.New(pnc, &producer.Config{Logger: quiet})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	payload, _ := json.Marshal(map[string]string{"pad": pad(cfg.PayloadBytes)})

	type sample struct {
		at         float64 // minutes since the start
		heapMB     float64
		goroutines float64
	}
	var samples []sample
	start := time.Now()
	jobs := 0
	cfg.phase("soak: rounds of %d jobs for %s", cfg.Jobs, d)
	for round := 1; time.Since(start) < d; round++ {
		if _, err := throughput(ctx, p, cfg, payload); err != nil {
			return nil, err
		}
		jobs += cfg.Jobs
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s := sample{at: time.Since(start).Minutes(), heapMB: float64(ms.HeapInuse) / (1 << 20), goroutines: float64(runtime.NumGoroutine())}
		samples = append(samples, s)
		if round%10 == 0 {
			cfg.phase("soak: %s, %d jobs, heap %.1f MiB, %d goroutines", time.Since(start).Round(time.Second), jobs, s.heapMB, int(s.goroutines))
		}
	}
	elapsed := time.Since(start)
	// The first half of the run (at most 5 min) is the warm-up: caches,
	// pools, the requester's session followers (kept 2 min idle), the
	// events kept 2 minutes, and the embedded server's ephemeral consumers
	// of each round's event reads (removed 5 min after their last use)
	// fill up. The slope is over the rest.
	warm := min(d.Minutes()/2, 5)
	for len(samples) > 3 && samples[0].at < warm {
		samples = samples[1:]
	}
	xs := make([]float64, len(samples))
	heap := make([]float64, len(samples))
	gor := make([]float64, len(samples))
	for i, s := range samples {
		xs[i], heap[i], gor[i] = s.at, s.heapMB, s.goroutines
	}
	figs := []Figure{
		{"soak_minutes", elapsed.Minutes(), "min"},
		{"soak_jobs", float64(jobs), "jobs"},
		{"soak_throughput", float64(jobs) / elapsed.Seconds(), "jobs/s"},
		{"soak_heap_first_mb", heap[0], "MiB"},
		{"soak_heap_last_mb", heap[len(heap)-1], "MiB"},
		{"soak_heap_slope_mb_per_min", slope(xs, heap), "MiB/min"},
		{"soak_goroutines_first", gor[0], "goroutines"},
		{"soak_goroutines_last", gor[len(gor)-1], "goroutines"},
		{"soak_goroutines_slope_per_min", slope(xs, gor), "goroutines/min"},
	}
	js, err := jetstream.New(wnc)
	if err != nil {
		return nil, err
	}
	c, err := js.Consumer(ctx, contracts.Subjects{}.JobsStream(), contracts.Subjects{}.ConsumerName(worker.ToolNoop))
	if err != nil {
		return nil, fmt.Errorf("bench: soak: consumer: %w", err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: soak: consumer: %w", err)
	}
	figs = append(figs, Figure{"soak_redelivered", float64(ci.NumRedelivered), "jobs"})
	cfg.phase("done")
	return figs, nil
}

// slope is the least-squares slope of ys over xs (0 for fewer than two
// points).
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / den
}
