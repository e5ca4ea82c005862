package producer_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
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

// BenchmarkSubmitBatch is one batch of 10,000 jobs a loop, by publish
// window; it reports jobs/s and the process's CPU a job (the embedded
// server's included), which a loaded machine moves less than the rate.
func BenchmarkSubmitBatch(b *testing.B) {
	srv := testutil.StartJetStream(b)
	nc := srv.Connect(b)
	js := testutil.JetStream(b, nc)
	cfg, err := bus.Config{}.WithDefaults()
	require.NoError(b, err)
	require.NoError(b, bus.Ensure(testutil.Context(b, 10*time.Second), js, cfg))
	bb := &bundle{nc: nc, js: js}
	bb.serveTB(b, "bench")
	p, err := producer.New(nc, &producer.Config{Logger: quiet})
	require.NoError(b, err)
	b.Cleanup(p.Close)
	in := json.RawMessage(`{"pad":"` + strings.Repeat("x", 128) + `"}`)
	const n = 10000
	var batch int
	for _, window := range []int{256, producer.DefaultBatchWindow, 4096} {
		b.Run(fmt.Sprintf("window=%d", window), func(b *testing.B) {
			ctx := testutil.Context(b, 5*time.Minute)
			var took, cpu time.Duration
			for range b.N {
				batch++
				jobs := make([]*contracts.Job, n)
				for i := range jobs {
					jobs[i] = &contracts.Job{ID: fmt.Sprintf("w%d-%d-%d", window, batch, i), Tool: "bench", Input: in}
				}
				start, cpu0 := time.Now(), processCPU()
				res, err := p.SubmitBatch(ctx, jobs, &producer.BatchOpts{Window: window})
				took += time.Since(start)
				cpu += processCPU() - cpu0
				require.NoError(b, err)
				require.Equal(b, n, res.Submitted)
			}
			b.ReportMetric(float64(n*b.N)/took.Seconds(), "jobs/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(n*b.N), "cpu-us/job")
		})
	}
}
