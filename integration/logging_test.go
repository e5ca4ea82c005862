package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"log"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/embedded"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/scheduler"
	"github.com/toolq/toolq/tools/codemode"
	"github.com/toolq/toolq/worker"
)

// recorder is an io.Writer that keeps what was written, safe for
// concurrent writers.
type recorder struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.b.Write(p)
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.b.String()
}

// TestLibraryLogsOnlyThroughItsLogger: given a logger, the library — the
// worker, producer, code mode on the sandbox, both scheduler engines (asynq's
// logs through its adapter) and the embedded server's own logs — writes
// nothing to Go's default loggers (slog.Default, the log package), whatever
// the jobs do: complete, fail, retry, cancel, suspend and resume, throw.
func TestLibraryLogsOnlyThroughItsLogger(t *testing.T) { //nolint:paralleltest // replaces the process's default loggers, which a parallel test would write to
	var defaults recorder
	prevSlog, prevOut, prevFlags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(slog.New(slog.NewTextHandler(&defaults, &slog.HandlerOptions{Level: slog.LevelDebug})))
	log.SetOutput(&defaults)
	t.Cleanup(func() {
		slog.SetDefault(prevSlog)
		log.SetOutput(prevOut)
		log.SetFlags(prevFlags)
	})
	var given recorder
	logger := slog.New(slog.NewJSONHandler(&given, &slog.HandlerOptions{Level: slog.LevelDebug}))

	ctx := testutil.Context(t, 60*time.Second)
	srv, err := embedded.Start(&embedded.Config{StoreDir: t.TempDir(), Logs: true, Logger: logger})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	nc, err := srv.Connect()
	require.NoError(t, err)
	t.Cleanup(nc.Close)

	w, err := worker.New(nc, &worker.Config{Logger: logger, Builtins: true})
	require.NoError(t, err)
	require.NoError(t, w.Register("flaky", worker.HandlerFunc(func(ctx context.Context, j *contracts.Job) (json.RawMessage, error) {
		if worker.Attempt(ctx) < 2 {
			return nil, worker.RetryAfter(10*time.Millisecond, contracts.Errorf(contracts.CodeProviderUnavailable, "try again"))
		}
		return j.Input, nil
	}), &worker.ToolConfig{Retry: worker.RetryPolicy{MaxAttempts: 3}}))
	engine, err := sandbox.NewEngine(ctx, &sandbox.EngineConfig{SnapshotKey: bytes.Repeat([]byte{7}, 32)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = engine.Close(context.Background()) })
	_, err = codemode.Register(w, nc, &codemode.Config{Engine: engine, Logger: logger})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))

	natsSched, err := scheduler.NewNATS(nc, &scheduler.NATSConfig{Logger: logger})
	require.NoError(t, err)
	require.NoError(t, natsSched.Start(ctx))
	redis := testutil.StartRedis(t)
	opt, err := asynq.ParseRedisURI(redis.URL())
	require.NoError(t, err)
	asynqSched, err := scheduler.NewAsynq(nc, &scheduler.AsynqConfig{Redis: opt, Logger: logger, Subjects: contracts.Subjects{Prefix: "other"}})
	require.NoError(t, err)
	require.NoError(t, asynqSched.Start(ctx))

	p, err := producer.New(nc, &producer.Config{Logger: logger, Session: "logs"})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	await := func(job *contracts.Job) *contracts.Event {
		t.Helper()
		ev, err := p.Await(ctx, job.Session, job.ID, nil)
		require.NoError(t, err)
		return ev
	}
	job, err := p.Submit(ctx, worker.ToolNoop, json.RawMessage(`{"n":1}`), nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, await(job).Data.Status)
	job, err = p.Submit(ctx, "flaky", json.RawMessage(`{"n":2}`), nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, await(job).Data.Status)
	job, err = p.Submit(ctx, worker.ToolSleep, json.RawMessage(`{"ms":-1}`), nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusFailed, await(job).Data.Status)
	job, err = p.Submit(ctx, worker.ToolSleep, json.RawMessage(`{"ms":60000}`), nil)
	require.NoError(t, err)
	require.NoError(t, p.Cancel(ctx, job.Session, job.ID))
	require.Equal(t, contracts.StatusCancelled, await(job).Data.Status)
	run, err := p.SubmitCode(ctx, &contracts.CodeModeExecInput{
		Code: `const r = await tools.callValue("toolq:core:noop", {n: 3}); if (r.n) throw new Error("boom"); return r;`, AutoResume: true,
	}, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusFailed, await(run).Data.Status)

	// A schedule fires through the NATS engine.
	sc, err := scheduler.NewClient(nc, &scheduler.ClientConfig{Logger: logger})
	require.NoError(t, err)
	s, err := sc.Create(ctx, &scheduler.Schedule{ID: "tick", In: time.Second, Job: scheduler.Job{Tool: worker.ToolNoop, Session: "logs"}})
	require.NoError(t, err)
	ev, err := p.Await(ctx, "logs", s.JobID(s.At), nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)

	stopCtx := testutil.Context(t, 30*time.Second)
	require.NoError(t, asynqSched.Stop(stopCtx))
	require.NoError(t, natsSched.Stop(stopCtx))
	require.NoError(t, w.Stop(stopCtx))
	srv.Stop()

	require.Empty(t, defaults.String(), "the library wrote to Go's default loggers")
	require.Contains(t, given.String(), `"msg"`, "the given logger received the logs")
	require.Contains(t, given.String(), "nats-server", "the embedded server logs through the given logger")
}
