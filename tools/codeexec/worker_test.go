package codeexec_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/tools/codeexec"
	"github.com/toolq/toolq/worker"
)

// onBus runs code_execution on a worker against a real JetStream server,
// with xai pointed at a local server speaking its wire format: breakers
// open after 2 faults for 300 ms, one HTTP attempt per provider run, and
// up to maxAttempts worker attempts 10 ms apart.
func onBus(t *testing.T, xai http.HandlerFunc, maxAttempts int) (*producer.Producer, *atomic.Int32) {
	t.Helper()
	srv := testutil.StartJetStream(t)
	var hits atomic.Int32
	fake := newFake(t, codeexec.XAI)
	fake.set(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		xai(w, r)
	})
	w, err := worker.New(srv.Connect(t), &worker.Config{
		Logger: quiet,
		Tool: worker.ToolConfig{
			Concurrency: 4,
			Retry:       worker.RetryPolicy{MaxAttempts: maxAttempts, InitialInterval: 10 * time.Millisecond, MaxInterval: 10 * time.Millisecond},
		},
	})
	require.NoError(t, err)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	_, err = codeexec.Register(w, &codeexec.Config{
		Providers:  map[string]*codeexec.ProviderConfig{codeexec.XAI: {APIKey: keys[codeexec.XAI], BaseURL: fake.srv.URL}},
		Getenv:     func(string) string { return "" },
		Logger:     quiet,
		HTTPClient: &http.Client{Transport: tr},
		NewBackOff: func() backoff.BackOff { return &backoff.ZeroBackOff{} },
		Retry:      codeexec.RetryConfig{MaxAttempts: 1},
		Breaker:    codeexec.BreakerConfig{Failures: 2, OpenTimeout: 300 * time.Millisecond},
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(testutil.Context(t, 10*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})
	prod, err := producer.New(srv.Connect(t), &producer.Config{Session: "s1", Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	return prod, &hits
}

func submitTasks(t *testing.T, prod *producer.Producer, n int, opts *producer.SubmitOpts) []*contracts.Job {
	t.Helper()
	jobs := make([]*contracts.Job, n)
	for i := range jobs {
		in, _ := json.Marshal(map[string]any{"task": fmt.Sprintf("task %d", i)})
		j, err := prod.Submit(testutil.Context(t, 5*time.Second), codeexec.ToolName, in, opts)
		require.NoError(t, err)
		jobs[i] = j
	}
	return jobs
}

// With the provider down, queued jobs wait for the breaker instead of
// spending their attempts on refusals: once it answers again every job
// completes, and the only attempts spent are the HTTP requests made.
func TestBreakerOnBusJobsWaitInsteadOfSpendingAttempts(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	prod, hits := onBus(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 4 {
			status(503, "")(w, r)
			return
		}
		ok(codeexec.XAI, "Mean: 42. Verified.")(w, r)
	}, 5)
	jobs := submitTasks(t, prod, 10, nil)
	failedAttempts := 0
	for _, j := range jobs {
		ev, err := prod.Await(testutil.Context(t, 60*time.Second), j.Session, j.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "job %s: %+v", j.ID, ev.Data.Error)
		failedAttempts += ev.Data.Attempt - 1
	}
	require.LessOrEqual(t, failedAttempts, 4, "an attempt is spent only on a request that failed")
	require.LessOrEqual(t, hits.Load(), int32(14))
}

// With the provider down for good, a job waits through the breaker's open
// periods within its deadline; its attempts run out only then, and its
// error names the upstream cause, not only the breaker.
func TestBreakerOnBusFinalErrorKeepsUpstreamCause(t *testing.T) {
	t.Parallel()
	prod, hits := onBus(t, status(503, ""), 2)
	jobs := submitTasks(t, prod, 3, &producer.SubmitOpts{TimeoutMs: 1500})
	for _, j := range jobs {
		ev, err := prod.Await(testutil.Context(t, 60*time.Second), j.Session, j.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusFailed, ev.Data.Status)
		require.Equal(t, 2, ev.Data.Attempt)
		require.Equal(t, contracts.CodeProviderUnavailable, ev.Data.Error.Code)
		require.Contains(t, ev.Data.Error.Message, "HTTP 503", "the upstream cause is kept")
	}
	// Two jobs' worth of 1.5 s attempts with a probe every 300 ms at most.
	require.Less(t, hits.Load(), int32(30))
}
