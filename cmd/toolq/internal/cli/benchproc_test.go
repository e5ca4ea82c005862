package cli

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/internal/testutil"
)

// TestMain lets bench --workers start this test binary as `toolq worker`:
// with TOOLQ_CLI_CHILD=1 it is the command line, not the tests.
func TestMain(m *testing.M) {
	if os.Getenv("TOOLQ_CLI_CHILD") == "1" {
		os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
	}
	childEnv = []string{"TOOLQ_CLI_CHILD=1"}
	os.Exit(m.Run())
}

// TestBenchScaleOut runs bench --workers 1,2 against a nats-server process
// with worker processes: each round prints its throughput, submit rate,
// latency, redeliveries (none) and where the CPU went, and stops its
// workers, which write their CPU profiles.
func TestBenchScaleOut(t *testing.T) {
	t.Parallel()
	srv := testutil.StartServerProcess(t, t.TempDir())
	profiles := t.TempDir()
	code, out, errOut := run(t, "--nats", srv.URL(), "bench", "--workers", "1,2", "--jobs", "600",
		"--submitters", "4", "--concurrency", "16", "--latency-jobs", "20", "--latency-interval", "1ms",
		"--worker-cpuprofiles", profiles, "--server-pid", strconv.Itoa(srv.Pid()))
	require.Equal(t, 0, code, errOut)
	figs := benchFigures(t, out)
	for _, n := range []string{"1", "2"} {
		names := []string{"e2e_throughput", "submit_rate", "e2e_latency_p50", "e2e_latency_p99"}
		if runtime.GOOS == "linux" {
			names = append(names, "cpu_per_job_requester", "cpu_per_job_workers", "cpu_per_job_server", "cpu_busy")
		}
		for _, name := range names {
			require.Positive(t, figs[name+"_workers_"+n], "%s_workers_%s in %v", name, n, figs)
		}
		require.LessOrEqual(t, figs["cpu_busy_workers_"+n], 100.0)
		v, ok := figs["redelivered_workers_"+n]
		require.True(t, ok, "redelivered_workers_%s", n)
		require.Zero(t, v)
	}
	for _, name := range []string{"bench-1-of-1", "bench-1-of-2", "bench-2-of-2"} {
		b, err := os.ReadFile(filepath.Join(profiles, name+".pprof")) //nolint:gosec // G304: the test's own temporary directory
		require.NoError(t, err)
		require.Greater(t, len(b), 2)
		require.Equal(t, []byte{0x1f, 0x8b}, b[:2], "%s.pprof is a gzipped profile", name)
	}
	require.Contains(t, errOut, "starting 2 worker processes")
	require.Contains(t, errOut, "stopping 2 worker processes")
	code, _, errOut = run(t, "--nats", srv.URL(), "bench", "--workers", "0")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "want 1 to 64")
}

// TestBenchCluster runs bench --cluster-server on a 3-node cluster of
// nats-server processes with two worker processes: the throughput, latency
// and redeliveries of R3 streams, then the failover of the jobs stream's
// leader under load, after which every job completed exactly once.
func TestBenchCluster(t *testing.T) { //nolint:paralleltest // starts three servers and two workers, and SIGKILLs a server: alone, its timings mean something
	bin := testutil.NATSServerBinary(t)
	code, out, errOut := run(t, "bench", "--cluster-server", bin, "--jobs", "400",
		"--submitters", "4", "--concurrency", "16", "--latency-jobs", "20", "--latency-interval", "1ms",
		"--failover-for", "3s")
	require.Equal(t, 0, code, errOut)
	figs := benchFigures(t, out)
	requireFigures(t, figs, []string{"e2e_throughput_cluster", "e2e_latency_p99_cluster", "leader_failover_stall_ms", "leader_failover_requester_stall_ms", "leader_failover_jobs"},
		[]string{"redelivered_cluster", "leader_failover_lost", "leader_failover_duplicates"})
	_, ok := figs["leader_failover_unreceived"]
	require.True(t, ok, "leader_failover_unreceived in %v", figs)
	require.Contains(t, errOut, "leader")
	require.Contains(t, errOut, "killed")
	code, _, errOut = run(t, "bench", "--cluster-server", bin, "--cluster-nodes", "2")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "want 3 to 5")
}

// TestBenchClusterLameDuck runs bench --cluster-server with the jobs
// stream's leader put in lame duck mode instead of killed, as a rolling
// upgrade of the servers does: its figures are leader_lameduck_*, and
// every job completed exactly once.
func TestBenchClusterLameDuck(t *testing.T) { //nolint:paralleltest // starts three servers and two workers: alone, its timings mean something
	bin := testutil.NATSServerBinary(t)
	code, out, errOut := run(t, "bench", "--cluster-server", bin, "--jobs", "200",
		"--submitters", "4", "--concurrency", "16", "--latency-jobs", "0", "--failover", "lameduck", "--failover-for", "3s")
	require.Equal(t, 0, code, errOut)
	figs := benchFigures(t, out)
	requireFigures(t, figs, []string{"leader_lameduck_stall_ms", "leader_lameduck_jobs"}, []string{"leader_lameduck_lost", "leader_lameduck_duplicates"})
	_, killed := figs["leader_failover_stall_ms"]
	require.False(t, killed, "no kill figures in a lame duck run: %v", figs)
	require.Contains(t, errOut, "lame duck mode")
	code, _, errOut = run(t, "bench", "--cluster-server", bin, "--failover", "reboot")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "want kill or lameduck")
}

// TestBenchScenarioProcesses runs the concurrency and ratelimit scenarios,
// small, against a nats-server process with worker processes: one of the
// three concurrency workers is killed with SIGKILL, and the key was never
// run past its limit nor left a lease.
func TestBenchScenarioProcesses(t *testing.T) {
	t.Parallel()
	srv := testutil.StartServerProcess(t, t.TempDir())
	code, out, errOut := run(t, "--nats", srv.URL(), "bench", "--scenario", "concurrency", "--workers", "3",
		"--scenario-backlog", "300", "--scenario-concurrency", "4")
	require.Equal(t, 0, code, errOut)
	figs := benchFigures(t, out)
	require.Contains(t, errOut, "killing worker process 1 (SIGKILL)")
	require.InDelta(t, 3.0, figs["concurrency_worker_processes"], 0, out)
	require.Positive(t, figs["concurrency_max_observed"], out)
	require.LessOrEqual(t, figs["concurrency_max_observed"], figs["concurrency_limit"], out)
	require.Zero(t, figs["concurrency_slot_leaks"], out)

	code, out, errOut = run(t, "--nats", srv.URL(), "bench", "--scenario", "ratelimit", "--workers", "2",
		"--scenario-duration", "2s", "--scenario-concurrency", "4")
	require.Equal(t, 0, code, errOut)
	figs = benchFigures(t, out)
	require.InDelta(t, 2.0, figs["ratelimit_worker_processes"], 0, out)
	require.InDelta(t, 50, figs["ratelimit_observed"], 15, out)

	code, _, errOut = run(t, "--nats", srv.URL(), "bench", "--scenario", "fairness", "--workers", "2")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "want one of [concurrency ratelimit]")
}

// requireFigures requires each of positive among figs with a value above
// 0, and each of zero with the value 0.
func requireFigures(t *testing.T, figs map[string]float64, positive, zero []string) {
	t.Helper()
	for _, name := range positive {
		require.Positive(t, figs[name], "%s in %v", name, figs)
	}
	for _, name := range zero {
		v, ok := figs[name]
		require.True(t, ok, "%s in %v", name, figs)
		require.Zero(t, v, name)
	}
}

// benchFigures reads bench's stdout, one "bench.<name> <value> <unit>" line
// a figure, into a map by name.
func benchFigures(t *testing.T, out string) map[string]float64 {
	t.Helper()
	figs := map[string]float64{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		fs := strings.Fields(line)
		require.Len(t, fs, 3, line)
		v, err := strconv.ParseFloat(fs[1], 64)
		require.NoError(t, err, line)
		figs[strings.TrimPrefix(fs[0], "bench.")] = v
	}
	return figs
}
