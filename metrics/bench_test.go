package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/metrics"
	"github.com/toolq/toolq/worker"
)

// BenchmarkToolObserver is what metrics add to one job: a Started and an
// Ended on series looked up once. It reports no allocation.
func BenchmarkToolObserver(b *testing.B) {
	m, err := metrics.New(prometheus.NewRegistry(), nil)
	require.NoError(b, err)
	obs := m.Worker().Tool("noop", "acme")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			obs.Started(1, time.Millisecond)
			obs.Ended(worker.OutcomeCompleted, time.Millisecond)
		}
	})
}

func TestToolObserverAllocatesNothing(t *testing.T) { //nolint:paralleltest // AllocsPerRun refuses a parallel test
	m, err := metrics.New(prometheus.NewRegistry(), nil)
	require.NoError(t, err)
	obs := m.Worker().Tool("noop", "")
	allocs := testing.AllocsPerRun(1000, func() {
		obs.Started(1, time.Millisecond)
		obs.Ended(worker.OutcomeCompleted, time.Millisecond)
	})
	require.Zero(t, allocs)
}
