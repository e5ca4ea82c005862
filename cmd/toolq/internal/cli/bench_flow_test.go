package cli

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// `bench --scenario` runs each flow-control scenario, small, and prints its
// figures with and without the flow control they measure.
func TestBenchScenarios(t *testing.T) {
	t.Parallel()
	for scenario, names := range map[string][]string{
		"fairness":    {"fairness_quiet_p50_ms", "fairness_quiet_p99_ms", "fairness_off_quiet_p50_ms", "fairness_off_quiet_p99_ms"},
		"sessions":    {"session_fairness_quiet_p50_ms", "session_fairness_quiet_p99_ms", "session_fairness_off_quiet_p50_ms", "session_fairness_off_quiet_p99_ms"},
		"priority":    {"priority_high_start_ms", "priority_off_start_ms"},
		"concurrency": {"concurrency_limit", "concurrency_max_observed", "concurrency_throughput"},
		"ratelimit":   {"ratelimit_configured", "ratelimit_observed"},
	} {
		code, out, errOut := run(t, "bench", "--scenario", scenario, "--scenario-backlog", "300", "--scenario-probes", "5", "--scenario-concurrency", "4", "--scenario-duration", "2s")
		require.Equal(t, 0, code, errOut)
		for _, name := range names {
			var line string
			for l := range strings.SplitSeq(out, "\n") {
				if strings.HasPrefix(l, "bench."+name+" ") {
					line = l
				}
			}
			require.NotEmpty(t, line, "%s: no %s in\n%s", scenario, name, out)
			v, err := strconv.ParseFloat(strings.Fields(line)[1], 64)
			require.NoError(t, err, line)
			require.Greater(t, v, 0.0, line)
		}
	}
	code, _, errOut := run(t, "bench", "--scenario", "chaos")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, `--scenario "chaos": want one of [fairness sessions priority concurrency ratelimit]`)
}

// `bench --soak` runs rounds for the given time and prints the slopes of
// heap and goroutines and the redeliveries.
func TestBenchSoak(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "bench", "--soak", "2s", "--jobs", "300", "--submitters", "4", "--concurrency", "8")
	require.Equal(t, 0, code, errOut)
	for _, name := range []string{"soak_jobs", "soak_throughput", "soak_heap_slope_mb_per_min", "soak_goroutines_slope_per_min", "soak_redelivered"} {
		require.Contains(t, out, "bench."+name+" ", out)
	}
	require.Contains(t, out, "bench.soak_redelivered 0 jobs")
}
