package producer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
)

// SubmitBatch enqueues every valid job once, tells each outcome in order,
// refuses a bad job without stopping the batch, and a second run of the
// same batch enqueues nothing more.
func TestSubmitBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testutil.Context(t, 30*time.Second)
	build := func() []*contracts.Job {
		jobs := make([]*contracts.Job, 0, 600)
		for i := range 600 {
			jobs = append(jobs, &contracts.Job{ID: fmt.Sprintf("b-%04d", i), Tool: "noop", Input: []byte(fmt.Sprintf(`{"n":%d}`, i))})
		}
		jobs[300].ID = "not an id"
		return jobs
	}
	var seen []int
	res, err := b.prod.SubmitBatch(ctx, build(), &producer.BatchOpts{Window: 64, OnAck: func(i int, job *contracts.Job, err error) {
		seen = append(seen, i)
		require.Equal(t, "p", job.Session, "the producer's session")
	}})
	require.NoError(t, err)
	require.Equal(t, 599, res.Submitted)
	require.Equal(t, 1, res.Failed)
	require.ErrorIs(t, res.Errors[300], contracts.ErrInvalidInput)
	require.Len(t, seen, 600)
	for i, v := range seen {
		require.Equal(t, i, v, "outcomes come in the order of the jobs")
	}
	st, err := b.js.Stream(ctx, contracts.Subjects{}.JobsStream())
	require.NoError(t, err)
	require.Equal(t, uint64(599), st.CachedInfo().State.Msgs)

	again, err := b.prod.SubmitBatch(ctx, build(), nil)
	require.NoError(t, err)
	require.Equal(t, 0, again.Submitted)
	require.Equal(t, 599, again.Duplicates, "a rerun within the duplicate window enqueues nothing twice")
	st, err = b.js.Stream(ctx, contracts.Subjects{}.JobsStream())
	require.NoError(t, err)
	require.Equal(t, uint64(599), st.CachedInfo().State.Msgs)
}
