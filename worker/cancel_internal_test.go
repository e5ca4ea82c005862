package worker

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCancelMemoryIsBounded(t *testing.T) {
	t.Parallel()
	w := &Worker{inflight: map[string]*inflight{}}
	w.cancels = newCancelMemory(time.Hour, 1000)
	for i := range 5000 {
		w.markCancelled("job-" + strconv.Itoa(i))
	}
	require.Equal(t, 1000, w.cancels.len())
	now := time.Now()
	// Recent cancels are remembered; dropped ones ask for a look-up.
	ok, _ := w.cancels.has("job-4999", now)
	require.True(t, ok)
	ok, lookup := w.cancels.has("job-0", now)
	require.False(t, ok)
	require.True(t, lookup)
	// Expired ones go first and need no look-up once all dropped ones
	// would have expired.
	ok, lookup = w.cancels.has("job-0", now.Add(2*time.Hour))
	require.False(t, ok)
	require.False(t, lookup)
	w.cancels.add("late", now.Add(2*time.Hour))
	require.Equal(t, 1, w.cancels.len())
}

// BenchmarkMarkCancelled is the cost of one cancel with a million cancels
// remembered (before the bound: 44 ms per cancel, a scan of the whole map
// under the worker's lock; see RATIONALE).
func BenchmarkMarkCancelled(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			w := &Worker{inflight: map[string]*inflight{}}
			w.cancels = newCancelMemory(24*time.Hour, n)
			now := time.Now()
			for i := range n {
				w.cancels.add("old-"+strconv.Itoa(i), now)
			}
			b.ResetTimer()
			for i := range b.N {
				w.markCancelled("new-" + strconv.Itoa(i))
			}
		})
	}
}
