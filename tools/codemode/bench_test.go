package codemode_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
)

// BenchmarkRoundTrip measures exec → nested noop call as a job → suspend →
// resume → completed, one run at a time, and reports the p50/p99 latency.
func BenchmarkRoundTrip(b *testing.B) {
	roundTrips(b, setupB(b))
}

// BenchmarkRoundTripCluster is BenchmarkRoundTrip on a 3-node cluster of
// nats-server processes, every stream and bucket R3: each stored message,
// and each acknowledgement of a durable consumer, is a write of a Raft
// group. (The three servers share this machine's cores.)
func BenchmarkRoundTripCluster(b *testing.B) {
	servers, _ := testutil.StartCluster(b, 3)
	roundTrips(b, setupBOn(b, testutil.ClusterURL(servers), 3))
}

func roundTrips(b *testing.B, bb *bundle) {
	b.Helper()
	in, _ := json.Marshal(map[string]any{
		"code":       `const r = await tools.callValue("toolq:core:noop", {x: 1}); return r.x + 1;`,
		"autoResume": true,
	})
	ctx := testutil.Context(b, 5*time.Minute)
	hops := traceHops(b, bb.url)
	run := func() time.Duration {
		start := time.Now()
		job, err := bb.prod.Submit(ctx, contracts.ToolCodeModeExec, in, nil)
		if err != nil {
			b.Fatal(err)
		}
		ev, err := bb.prod.Await(ctx, job.Session, job.ID, nil)
		if err != nil {
			b.Fatal(err)
		}
		if ev.Data.Status != contracts.StatusCompleted {
			b.Fatalf("run %s: %s", job.ID, ev.Data.Status)
		}
		hops.end(job.ID)
		return time.Since(start)
	}
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		lat = append(lat, run())
	}
	b.StopTimer()
	// The hops are traced in runs of their own after the timed ones: the
	// tracer's subscription to every subject slows the runs it watches.
	hops.on()
	for range min(len(lat), 100) {
		hops.begin()
		run()
	}
	hops.report(b)
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
}

// BenchmarkSuspendedRuns suspends 1,000 runs at once (each waiting on a
// client tool) and reports the worker process's live heap per suspended
// run, then 1,000 more and the heap each of those added: the runs live in
// NATS, not in the worker's memory; what the first ones add is mostly the
// records the worker keeps of its recent runs (recentMaxBytes), which the
// second thousand no longer grow.
func BenchmarkSuspendedRuns(b *testing.B) {
	bb := setupB(b)
	ctx := testutil.Context(b, 10*time.Minute)
	if err := bb.prod.RegisterClientTool(ctx, contracts.CatalogTool{ID: "client:bench:ask", Name: "ask", Description: "Ask a person."}); err != nil {
		b.Fatal(err)
	}
	const runs = 1000
	in, _ := json.Marshal(map[string]any{
		"code":   `const a = await tools.callValue("client:bench:ask", {q: "ok?"}); return a;`,
		"limits": map[string]any{"snapshotTtlSeconds": 3600},
	})
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	suspend := func(session string) {
		job, err := bb.prod.Submit(ctx, contracts.ToolCodeModeExec, in, &producer.SubmitOpts{Session: session})
		if err != nil {
			b.Fatal(err)
		}
		ev, err := bb.prod.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
		if err != nil || ev.Data.Status != contracts.StatusWaiting {
			b.Fatalf("run in %s: %v %v", session, err, ev)
		}
	}
	// Warm up: the engine's VM pool and the connections' buffers.
	for i := range 50 {
		suspend(fmt.Sprintf("warm-%d", i%5))
	}
	iter := 0
	for b.Loop() {
		iter++
		before := heap()
		// 40 sessions: 50 runs each, within the cap of a session's.
		for i := range runs {
			suspend(fmt.Sprintf("i%d-s%d", iter, i%40))
		}
		first := heap()
		for i := range runs {
			suspend(fmt.Sprintf("i%d-s%d", iter, i%40))
		}
		second := heap()
		b.ReportMetric((float64(first)-float64(before))/runs, "heap_bytes/suspended_run")
		b.ReportMetric(float64(first)/(1<<20), "heap_MiB_with_1000_suspended")
		b.ReportMetric((float64(second)-float64(first))/runs, "heap_bytes/suspended_run_past_1000")
	}
}
