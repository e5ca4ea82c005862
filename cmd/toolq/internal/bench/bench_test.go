package bench

import (
	"context"
	"testing"
	"time"
)

// TestRunSmall runs a small end-to-end measurement: every figure is produced
// and positive.
func TestRunSmall(t *testing.T) {
	t.Parallel()
	runSmall(t, false)
}

// TestRunSmallThroughATenant runs it with the jobs, results and events
// crossing a tenant account's imports.
func TestRunSmallThroughATenant(t *testing.T) {
	t.Parallel()
	runSmall(t, true)
}

func runSmall(t *testing.T, tenants bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := Defaults()
	cfg.Jobs, cfg.LatencyJobs, cfg.StoreDir, cfg.Tenants = 2000, 50, t.TempDir(), tenants
	figs, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"e2e_throughput": false, "submit_rate": false, "e2e_latency_p50": false, "e2e_latency_p99": false, "slow_consumers": false, "redelivered": false, "batch_submit_rate": false, "cpu_per_job": false}
	for _, f := range figs {
		t.Log(f)
		if _, ok := want[f.Name]; !ok {
			t.Errorf("unexpected figure %s", f.Name)
		}
		want[f.Name] = true
		if f.Unit != "count" && f.Unit != "jobs" && f.Value <= 0 {
			t.Errorf("%s = %v, want > 0", f.Name, f.Value)
		}
	}
	for n, seen := range want {
		if !seen {
			t.Errorf("figure %s missing", n)
		}
	}
}

// BenchmarkEndToEnd reports toolq's end-to-end figures through testing.B.
func BenchmarkEndToEnd(b *testing.B) {
	cfg := Defaults()
	cfg.Jobs, cfg.LatencyJobs, cfg.StoreDir = 20000, 500, b.TempDir()
	for b.Loop() {
		figs, err := Run(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range figs {
			b.ReportMetric(f.Value, f.Name+"_"+f.Unit)
		}
	}
}

// TestRunSmallTraced runs it with metrics and tracing on: the spans are
// exported to the local receiver.
func TestRunSmallTraced(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := Defaults()
	cfg.Jobs, cfg.LatencyJobs, cfg.StoreDir, cfg.Metrics, cfg.Tracing = 500, 0, t.TempDir(), true, true
	figs, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range figs {
		if f.Name == "trace_exports" {
			if f.Value < 1 {
				t.Fatalf("no trace export reached the receiver")
			}
			return
		}
	}
	t.Fatal("no trace_exports figure")
}
