package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats-server and nats.go keep a few process-wide goroutines.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go.(*Conn).doReconnect"),
		goleak.IgnoreTopFunction("time.Sleep"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).syncBlocks"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"),
	)
}

var quiet = slog.New(slog.DiscardHandler)

// withBuiltins is the configuration of a worker that runs noop and sleep.
var withBuiltins = &worker.Config{Builtins: true}

type bundle struct {
	srv  *testutil.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	prod *producer.Producer
}

func setup(t *testing.T) *bundle {
	t.Helper()
	srv := testutil.StartJetStream(t)
	nc := srv.Connect(t)
	prod, err := producer.New(nc, &producer.Config{Session: "s1", Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	return &bundle{srv: srv, nc: nc, js: testutil.JetStream(t, nc), prod: prod}
}

// startWorker starts a worker on its own connection; it is stopped when the
// test ends.
func (b *bundle) startWorker(t *testing.T, cfg *worker.Config, register func(w *worker.Worker)) *worker.Worker {
	t.Helper()
	var c worker.Config
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = quiet
	}
	w, err := worker.New(b.srv.Connect(t), &c)
	require.NoError(t, err)
	if register != nil {
		register(w)
	}
	require.NoError(t, w.Start(testutil.Context(t, 10*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})
	return w
}

func (b *bundle) submit(t *testing.T, tool string, input string, opts *producer.SubmitOpts) *contracts.Job {
	t.Helper()
	var in json.RawMessage
	if input != "" {
		in = json.RawMessage(input)
	}
	job, err := b.prod.Submit(testutil.Context(t, 5*time.Second), tool, in, opts)
	require.NoError(t, err)
	return job
}

func (b *bundle) await(t *testing.T, job *contracts.Job) *contracts.Event {
	t.Helper()
	ev, err := b.prod.Await(testutil.Context(t, 30*time.Second), job.Session, job.ID, nil)
	require.NoError(t, err)
	return ev
}

// allEvents returns every stored event of a session.
func (b *bundle) allEvents(t *testing.T, session string) []*contracts.Event {
	t.Helper()
	var evs []*contracts.Event
	require.NoError(t, b.prod.ReadEvents(testutil.Context(t, 30*time.Second), session, nil, func(ev *contracts.Event) error {
		evs = append(evs, ev)
		return nil
	}))
	return evs
}

func TestNoopCompletes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, withBuiltins, nil)
	job := b.submit(t, worker.ToolNoop, `{"hello":"world"}`, nil)
	ev := b.await(t, job)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	require.JSONEq(t, `{"hello":"world"}`, string(ev.Data.Result))
	require.Equal(t, "1.0", ev.SpecVersion)
	require.Equal(t, "toolq.job.completed", ev.Type)
	require.Equal(t, job.ID+"/completed/1", ev.ID)
	require.Equal(t, 1, ev.Data.Attempt)
}

func TestDottedToolNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, nil, func(w *worker.Worker) {
		for _, name := range []string{"ns.tool", "ns__tool"} {
			require.NoError(t, w.Register(name, worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
				return json.Marshal(name)
			}), nil))
		}
	})
	require.JSONEq(t, `"ns.tool"`, string(b.await(t, b.submit(t, "ns.tool", ``, nil)).Data.Result))
	require.JSONEq(t, `"ns__tool"`, string(b.await(t, b.submit(t, "ns__tool", ``, nil)).Data.Result))
}

func TestAwaitAfterEventPublished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, withBuiltins, nil)
	job := b.submit(t, worker.ToolNoop, `1`, nil)
	// Read the event through another route first, so it surely exists.
	require.Eventually(t, func() bool {
		evs := b.allEvents(t, job.Session)
		return len(evs) == 1 && evs[0].Data.Status == contracts.StatusCompleted
	}, 10*time.Second, 20*time.Millisecond)
	ev := b.await(t, job)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
}

func TestSubmitDeduplicated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("count", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			runs.Add(1)
			return json.RawMessage(`"ok"`), nil
		}), nil))
	})
	job1 := b.submit(t, "count", ``, &producer.SubmitOpts{ID: "same-id"})
	// The duplicate is reported as such, with the same job.
	job2, err := b.prod.Submit(testutil.Context(t, 5*time.Second), "count", nil, &producer.SubmitOpts{ID: "same-id"})
	require.ErrorIs(t, err, producer.ErrDuplicate)
	require.Equal(t, job1.ID, job2.ID)
	b.await(t, job1)
	// A third, different job proves the queue moved past any duplicate.
	job3 := b.submit(t, "count", ``, nil)
	b.await(t, job3)
	require.Equal(t, int32(2), runs.Load())
	info, err := b.js.Stream(testutil.Context(t, 5*time.Second), "TOOLQ_JOBS")
	require.NoError(t, err)
	require.Equal(t, uint64(2), info.CachedInfo().State.LastSeq, "the duplicate must not be stored")
}

func TestRetryDelaysFollowPolicy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	var at []time.Time
	policy := worker.RetryPolicy{MaxAttempts: 4, InitialInterval: 300 * time.Millisecond, MaxInterval: 2 * time.Second, Multiplier: 2, RandomizationFactor: -1}
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("flaky", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			mu.Lock()
			at = append(at, time.Now())
			n := len(at)
			mu.Unlock()
			if n < 4 {
				return nil, &contracts.Error{Code: contracts.CodeProviderError, Message: "503", Retryable: true}
			}
			return json.RawMessage(`"finally"`), nil
		}), &worker.ToolConfig{Retry: policy}))
	})
	ev := b.await(t, b.submit(t, "flaky", ``, nil))
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	require.Equal(t, 4, ev.Data.Attempt)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, at, 4)
	for i := 1; i < len(at); i++ {
		want := policy.Delay(i)
		got := at[i].Sub(at[i-1])
		require.GreaterOrEqual(t, got, want, "attempt %d came early", i+1)
		require.Less(t, got, want+time.Second, "attempt %d came late", i+1)
	}
	require.Equal(t, 300*time.Millisecond, policy.Delay(1))
	require.Equal(t, 600*time.Millisecond, policy.Delay(2))
	require.Equal(t, 1200*time.Millisecond, policy.Delay(3))
	require.Equal(t, 2*time.Second, policy.Delay(5), "capped at MaxInterval")
}

func TestRetryPolicyJitterWithinBounds(t *testing.T) {
	t.Parallel()
	p := worker.RetryPolicy{MaxAttempts: 5, InitialInterval: time.Second, MaxInterval: time.Minute, Multiplier: 2, RandomizationFactor: 0.5}
	seen := map[time.Duration]bool{}
	for range 200 {
		d := p.Delay(2) // nominal 2 s
		require.GreaterOrEqual(t, d, time.Second)
		require.LessOrEqual(t, d, 3*time.Second)
		seen[d] = true
	}
	require.Greater(t, len(seen), 10, "jitter must spread the delays")
}

func TestPermanentErrorNotRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("bad", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			runs.Add(1)
			return nil, contracts.Errorf(contracts.CodeProviderError, "401 unauthorized")
		}), nil))
	})
	ev := b.await(t, b.submit(t, "bad", ``, nil))
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeProviderError, ev.Data.Error.Code)
	require.Equal(t, int32(1), runs.Load())
}

func TestDLQAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("doomed", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			runs.Add(1)
			return nil, errors.New("boom")
		}), &worker.ToolConfig{Retry: worker.RetryPolicy{MaxAttempts: 3, InitialInterval: 10 * time.Millisecond, MaxInterval: 20 * time.Millisecond}}))
	})
	job := b.submit(t, "doomed", `{"x":1}`, nil)
	ev := b.await(t, job)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeInternalError, ev.Data.Error.Code)
	require.Equal(t, "boom", ev.Data.Error.Message)
	require.Equal(t, 3, ev.Data.Attempt)
	require.Equal(t, int32(3), runs.Load())

	dl := readDLQ(t, b, "doomed")
	require.Equal(t, job.ID, dl.JobID)
	require.Equal(t, 3, dl.Attempts)
	require.Equal(t, "boom", dl.Error.Message)
	var stored contracts.Job
	require.NoError(t, json.Unmarshal(dl.Job, &stored))
	require.JSONEq(t, `{"x":1}`, string(stored.Input))
	requireQueueEmpty(t, b)
}

func TestJobMaxAttemptsBelowToolCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("doomed", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			runs.Add(1)
			return nil, errors.New("boom")
		}), &worker.ToolConfig{Retry: worker.RetryPolicy{MaxAttempts: 5, InitialInterval: 10 * time.Millisecond, MaxInterval: 20 * time.Millisecond}}))
	})
	ev := b.await(t, b.submit(t, "doomed", ``, &producer.SubmitOpts{MaxAttempts: 2}))
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, int32(2), runs.Load())
}

func readDLQ(t *testing.T, b *bundle, tool string) contracts.DeadLetter {
	t.Helper()
	st, err := b.js.Stream(testutil.Context(t, 5*time.Second), "TOOLQ_DLQ")
	require.NoError(t, err)
	var raw *jetstream.RawStreamMsg
	require.Eventually(t, func() bool {
		raw, err = st.GetLastMsgForSubject(testutil.Context(t, 5*time.Second), "toolq.dlq."+tool)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	var dl contracts.DeadLetter
	require.NoError(t, json.Unmarshal(raw.Data, &dl))
	return dl
}

func requireQueueEmpty(t *testing.T, b *bundle) {
	t.Helper()
	require.Eventually(t, func() bool {
		st, err := b.js.Stream(testutil.Context(t, 5*time.Second), "TOOLQ_JOBS")
		return err == nil && st.CachedInfo().State.Msgs == 0
	}, 10*time.Second, 20*time.Millisecond, "jobs stream must be empty")
}

func TestPanicBecomesFailedAndWorkerKeepsRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, withBuiltins, func(w *worker.Worker) {
		require.NoError(t, w.Register("panicky", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			panic("kaboom")
		}), nil))
	})
	ev := b.await(t, b.submit(t, "panicky", ``, nil))
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeInternalError, ev.Data.Error.Code)
	require.Contains(t, ev.Data.Error.Message, "kaboom")
	require.Equal(t, contracts.StatusCompleted, b.await(t, b.submit(t, worker.ToolNoop, `2`, nil)).Data.Status)
}

func TestMalformedJobsGetInvalidInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, withBuiltins, nil)
	ctx := testutil.Context(t, 10*time.Second)

	// The producer refuses bad ids before anything is sent.
	_, err := b.prod.Submit(ctx, worker.ToolNoop, nil, &producer.SubmitOpts{ID: "bad.id"})
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
	_, err = b.prod.Submit(ctx, worker.ToolNoop, nil, &producer.SubmitOpts{Session: "a b"})
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
	_, err = b.prod.Submit(ctx, "no..tool", nil, nil)
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
	_, err = b.prod.Submit(ctx, worker.ToolNoop, json.RawMessage(`{broken`), nil)
	require.ErrorIs(t, err, contracts.ErrInvalidInput)

	// The worker refuses what other publishers send: a bad field with a
	// valid id and session gets a failed event and is not redelivered.
	cases := map[string]string{
		"neg-timeout":   `{"id":"neg-timeout","session":"s1","tool":"noop","timeout_ms":-5}`,
		"wrong-tool":    `{"id":"wrong-tool","session":"s1","tool":"sleep"}`,
		"bad-parent":    `{"id":"bad-parent","session":"s1","tool":"noop","parent":{"run_id":"x.y","call_id":"c"}}`,
		"attempts-huge": `{"id":"attempts-huge","session":"s1","tool":"noop","max_attempts":1000}`,
	}
	for id, body := range cases {
		_, err := b.js.Publish(ctx, "toolq.jobs.noop", []byte(body))
		require.NoError(t, err)
		ev, err := b.prod.Await(ctx, "s1", id, nil)
		require.NoError(t, err, id)
		require.Equal(t, contracts.StatusFailed, ev.Data.Status, id)
		require.Equal(t, contracts.CodeInvalidInput, ev.Data.Error.Code, id)
	}
	// Garbage and a job with an invalid session cannot be answered: DLQ.
	_, err = b.js.Publish(ctx, "toolq.jobs.noop", []byte(`not json`))
	require.NoError(t, err)
	dl := readDLQ(t, b, "noop")
	require.Equal(t, contracts.CodeInvalidInput, dl.Error.Code)
	_, err = b.js.Publish(ctx, "toolq.jobs.noop", []byte(`{"id":"ok-id","session":"bad session","tool":"noop"}`))
	require.NoError(t, err)
	requireQueueEmpty(t, b)
}

func TestWorkerStoppedWithoutAckJobCompletesElsewhere(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	tc := &worker.ToolConfig{AckWait: 500 * time.Millisecond}
	// Worker A takes the job and then its connection dies without an ack.
	ncA := b.srv.Connect(t)
	wa, err := worker.New(ncA, &worker.Config{Name: "A", Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, wa.Register("work", worker.HandlerFunc(func(ctx context.Context, _ *contracts.Job) (json.RawMessage, error) {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return json.RawMessage(`"from A"`), nil
	}), tc))
	require.NoError(t, wa.Start(testutil.Context(t, 10*time.Second)))
	job := b.submit(t, "work", ``, nil)
	<-started
	ncA.Close() // A is gone: no ack, no heartbeat, no event can be published.
	close(release)

	b.startWorker(t, &worker.Config{Name: "B"}, func(w *worker.Worker) {
		require.NoError(t, w.Register("work", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			return json.RawMessage(`"from B"`), nil
		}), tc))
	})
	ev := b.await(t, job)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	require.JSONEq(t, `"from B"`, string(ev.Data.Result))
	require.Equal(t, 2, ev.Data.Attempt)
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, wa.Stop(stopCtx))
}

func TestHeartbeatsKeepLongJobFromRedelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("long", worker.HandlerFunc(func(ctx context.Context, _ *contracts.Job) (json.RawMessage, error) {
			runs.Add(1)
			select {
			case <-time.After(1500 * time.Millisecond): // 5 ack waits
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return json.RawMessage(`"done"`), nil
		}), &worker.ToolConfig{AckWait: 300 * time.Millisecond}))
	})
	ev := b.await(t, b.submit(t, "long", ``, nil))
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	require.Equal(t, 1, ev.Data.Attempt)
	require.Equal(t, int32(1), runs.Load())
}

func TestRedeliveredFinishedJobAnsweredFromEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tc := &worker.ToolConfig{AckWait: 300 * time.Millisecond}
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	ncA := b.srv.Connect(t)
	wa, err := worker.New(ncA, &worker.Config{Name: "A", Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, wa.Register("once", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
		started <- struct{}{}
		<-release
		return json.RawMessage(`"late"`), nil
	}), tc))
	require.NoError(t, wa.Start(testutil.Context(t, 10*time.Second)))
	job := b.submit(t, "once", ``, nil)
	<-started

	// The job's terminal event is stored (as when a worker published it and
	// then died before its ack), then the worker holding it disappears.
	ctx := testutil.Context(t, 10*time.Second)
	ev := contracts.NewEvent("/test", job, contracts.StatusCompleted, 1, time.Now())
	ev.Data.Result = json.RawMessage(`"earlier"`)
	data, err := json.Marshal(ev)
	require.NoError(t, err)
	_, err = b.js.Publish(ctx, "toolq.events.s1."+job.ID, data)
	require.NoError(t, err)
	ncA.Close()
	close(release)

	var runsB atomic.Int32
	b.startWorker(t, &worker.Config{Name: "B"}, func(w *worker.Worker) {
		require.NoError(t, w.Register("once", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			runsB.Add(1)
			return json.RawMessage(`"ran again"`), nil
		}), tc))
	})
	requireQueueEmpty(t, b) // B took the redelivery and acked it
	got := b.await(t, job)
	require.JSONEq(t, `"earlier"`, string(got.Data.Result))
	require.Len(t, b.allEvents(t, "s1"), 1)
	require.Equal(t, int32(0), runsB.Load(), "a finished job must not run again")
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, wa.Stop(stopCtx))
}

// TestQueuedJobsWaitOutsideTheirAckWait: with every slot busy for longer
// than the ack wait, the jobs behind are not taken yet — a job taken and
// held for a slot would have its ack wait run out and be delivered again
// (to this worker or another) while its first delivery still waits, and
// then run twice. Each job runs once, on its first delivery.
func TestQueuedJobsWaitOutsideTheirAckWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	runs := map[string]int{}
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("slow", worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
			mu.Lock()
			runs[job.ID]++
			mu.Unlock()
			select {
			case <-time.After(1400 * time.Millisecond): // longer than the ack wait; the running job's heartbeat keeps it
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return json.RawMessage(`true`), nil
		}), &worker.ToolConfig{Concurrency: 2, AckWait: 600 * time.Millisecond}))
	})
	var jobs []*contracts.Job
	for range 6 {
		jobs = append(jobs, b.submit(t, "slow", ``, nil))
	}
	for _, job := range jobs {
		ev := b.await(t, job)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
		require.Equal(t, 1, ev.Data.Attempt, "job %s was delivered again", job.ID)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, job := range jobs {
		require.Equal(t, 1, runs[job.ID], "job %s ran %d times", job.ID, runs[job.ID])
	}
	c, err := b.js.Consumer(testutil.Context(t, 5*time.Second), "TOOLQ_JOBS", "worker_slow")
	require.NoError(t, err)
	require.Zero(t, c.CachedInfo().NumRedelivered)
}
