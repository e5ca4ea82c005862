package sandbox

import (
	"context"
	"encoding/json"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/toolq/toolq/sandbox/internal/engine"
	"github.com/toolq/toolq/sandbox/internal/snapshot"
)

type pendingBridge struct{ CatalogBridge }

func (pendingBridge) Call(context.Context, ToolCall) (CallOutcome, error) {
	return CallOutcome{Pending: true}, nil
}

func newBenchEngine(b *testing.B, pool int) *Engine {
	b.Helper()
	e, err := NewEngine(context.Background(), &EngineConfig{
		SnapshotKey: []byte("0123456789abcdef0123456789abcdef"), PoolSize: pool,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

func p50(d []time.Duration) float64 {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return float64(d[len(d)/2].Microseconds()) / 1000
}

// BenchmarkSnapshot measures the two halves of a suspension of a run idle
// on one pending call: snapshot+compress (host state, memory delta, zstd,
// HMAC) and decompress+restore (verify, zstd, delta, fresh instance).
func BenchmarkSnapshot(b *testing.B) {
	ctx := context.Background()
	e := newBenchEngine(b, 4)
	out, err := e.Exec(ctx, &ExecRequest{
		Input:   Input{Code: `const v = await tools.slow_add({a: 1, b: 2}); return v`},
		Catalog: []Tool{{CatalogEntry: CatalogEntry{ID: "client:app:slow_add", Name: "slow_add", Source: SourceClient}}},
		Bridge:  pendingBridge{},
	})
	if err != nil || out.Result.Status != StatusWaiting {
		b.Fatal(err, out.Result.Error)
	}
	blob := out.Snapshot
	snap, err := e.codec.Decode(blob, 0)
	if err != nil {
		b.Fatal(err)
	}
	var st hostState
	if err := json.Unmarshal(snap.Host, &st); err != nil {
		b.Fatal(err)
	}
	regs := engine.Registers{StackPointer: snap.StackPointer, RuntimePtr: snap.RuntimePtr, ContextPtr: snap.ContextPtr}

	b.Run("snapshot+compress", func(b *testing.B) {
		vm, err := e.rt.Restore(ctx, snap.Memory, regs)
		if err != nil {
			b.Fatal(err)
		}
		defer vm.Close(ctx)
		d := make([]time.Duration, 0, b.N)
		size := 0
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			host, err := json.Marshal(st)
			if err != nil {
				b.Fatal(err)
			}
			r, err := vm.Registers(ctx)
			if err != nil {
				b.Fatal(err)
			}
			out, err := e.codec.Encode(&snapshot.Snapshot{
				Memory: vm.Memory(), StackPointer: r.StackPointer,
				RuntimePtr: r.RuntimePtr, ContextPtr: r.ContextPtr, Host: host,
			}, 0)
			d = append(d, time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
			size = len(out)
		}
		b.ReportMetric(p50(d), "p50-ms")
		b.ReportMetric(float64(size), "compressed-bytes")
		b.ReportMetric(float64(len(snap.Memory)), "raw-bytes")
	})
	b.Run("decompress+restore", func(b *testing.B) {
		d := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			s, err := e.codec.Decode(blob, 0)
			if err != nil {
				b.Fatal(err)
			}
			var st hostState
			if err := json.Unmarshal(s.Host, &st); err != nil {
				b.Fatal(err)
			}
			vm, err := e.rt.Restore(ctx, s.Memory, engine.Registers{
				StackPointer: s.StackPointer,
				RuntimePtr:   s.RuntimePtr, ContextPtr: s.ContextPtr,
			})
			d = append(d, time.Since(t0))
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			vm.Close(ctx)
			b.StartTimer()
		}
		b.ReportMetric(p50(d), "p50-ms")
	})
	// What Resume does: the snapshot's changed chunks go over the image of
	// a warm pooled VM.
	b.Run("decompress+restore-pooled", func(b *testing.B) {
		d := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			s, err := e.codec.Open(blob, 0)
			if err != nil {
				b.Fatal(err)
			}
			var st hostState
			if err := json.Unmarshal(s.Host, &st); err != nil {
				b.Fatal(err)
			}
			vm, err := e.pool.Get(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := e.rt.LoadOverImage(ctx, vm, s.MemorySize, engine.Registers{
				StackPointer: s.StackPointer,
				RuntimePtr:   s.RuntimePtr, ContextPtr: s.ContextPtr,
			}, s.Apply); err != nil {
				b.Fatal(err)
			}
			s.Release()
			d = append(d, time.Since(t0))
			b.StopTimer()
			e.pool.Put(ctx, vm)
			b.StartTimer()
		}
		b.ReportMetric(p50(d), "p50-ms")
	})
}

// BenchmarkWarmVMMemory reports the Go heap held per warm pooled VM (the
// instance, its linear memory and wazero's per-instance state).
func BenchmarkWarmVMMemory(b *testing.B) {
	ctx := context.Background()
	const n = 16
	e := newBenchEngine(b, n)
	var before, after runtime.MemStats
	var per float64
	for range b.N {
		e.pool.Close(ctx)
		e.pool = engine.NewPool(e.rt, n, nil)
		runtime.GC()
		runtime.ReadMemStats(&before)
		if err := e.Warm(ctx, n); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per = float64(after.HeapAlloc-before.HeapAlloc) / n
	}
	b.ReportMetric(per, "heap-bytes/vm")
	b.ReportMetric(float64(len(e.rt.Image())), "linear-memory-bytes/vm")
}
