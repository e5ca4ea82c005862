package operator

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// workerMarks knows every consumer name a worker makes, levels and lanes,
// and nothing else.
func TestWorkerMarks(t *testing.T) {
	t.Parallel()
	s := contracts.Subjects{}
	for _, p := range contracts.Priorities {
		for lane := range contracts.SessionLanes {
			name := s.ConsumerNameLane("code_mode.exec", p, lane)
			_, marks, _ := cutConsumer(name)
			require.True(t, workerMarks(marks), name)
		}
	}
	for _, marks := range []string{"urgent", "s0", "s4", "s12", "high~low", "s1~high", "high~s1~s2", "~", "high~"} {
		require.False(t, workerMarks(marks), marks)
	}
}
