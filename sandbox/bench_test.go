package sandbox_test

import (
	"context"
	"runtime"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolq/toolq/sandbox"
)

// reportPercentiles reports the p50 and p99 of per-operation durations.
func reportPercentiles(b *testing.B, d []time.Duration) {
	b.Helper()
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkExecTrivial: pooled VM acquire + trivial program + release.
func BenchmarkExecTrivial(b *testing.B) {
	ctx := context.Background()
	catalog := testCatalog()
	req := &sandbox.ExecRequest{Input: sandbox.Input{Code: "return 1 + 1"}, Catalog: catalog}
	d := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		out, err := testEngine.Exec(ctx, req)
		d = append(d, time.Since(t0))
		if err != nil || out.Result.Status != sandbox.StatusCompleted {
			b.Fatal(err, out.Result.Error)
		}
	}
	reportPercentiles(b, d)
}

// BenchmarkExecParallel: sustained trivial execs on every core.
func BenchmarkExecParallel(b *testing.B) {
	ctx := context.Background()
	catalog := testCatalog()
	var failed atomic.Int64
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		req := &sandbox.ExecRequest{Input: sandbox.Input{Code: "return 1 + 1"}, Catalog: catalog}
		for pb.Next() {
			out, err := testEngine.Exec(ctx, req)
			if err != nil || out.Result.Status != sandbox.StatusCompleted {
				failed.Add(1)
			}
		}
	})
	elapsed := time.Since(start)
	if failed.Load() > 0 {
		b.Fatalf("%d execs failed", failed.Load())
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "execs/s")
	b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "procs")
}

// BenchmarkSuspendResume: exec to a snapshot idle on one pending call, then
// resume it with the result; full public paths.
func BenchmarkSuspendResume(b *testing.B) {
	ctx := context.Background()
	catalog := testCatalog()
	bridge := newBridge()
	var execD, resumeD []time.Duration
	size := 0
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		out, err := testEngine.Exec(ctx, &sandbox.ExecRequest{
			Input: sandbox.Input{Code: `const v = await tools.slow_add({a: 1, b: 2}); return v`}, Catalog: catalog, Bridge: bridge,
		})
		execD = append(execD, time.Since(t0))
		if err != nil || out.Result.Status != sandbox.StatusWaiting {
			b.Fatal(err, out.Result.Error)
		}
		size = len(out.Snapshot)
		t0 = time.Now()
		res, err := testEngine.Resume(ctx, &sandbox.ResumeRequest{
			Snapshot:    out.Snapshot,
			Settlements: []sandbox.Settlement{ok("call_1", 3)}, Bridge: bridge,
			RunID: out.Result.RunID, Step: out.Step,
		})
		resumeD = append(resumeD, time.Since(t0))
		if err != nil || res.Result.Status != sandbox.StatusCompleted {
			b.Fatal(err, res.Result.Error)
		}
		bridge.calls = bridge.calls[:0]
	}
	b.StopTimer()
	sort.Slice(execD, func(i, j int) bool { return execD[i] < execD[j] })
	sort.Slice(resumeD, func(i, j int) bool { return resumeD[i] < resumeD[j] })
	b.ReportMetric(float64(execD[len(execD)/2].Microseconds())/1000, "exec-to-waiting-p50-ms")
	b.ReportMetric(float64(resumeD[len(resumeD)/2].Microseconds())/1000, "resume-to-completed-p50-ms")
	b.ReportMetric(float64(size), "snapshot-bytes")
}
