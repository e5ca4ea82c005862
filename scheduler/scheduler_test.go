package scheduler_test

import (
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/scheduler"
	"github.com/toolq/toolq/scheduler/schedulertest"
	"github.com/toolq/toolq/worker"
)

func TestMain(m *testing.M) {
	// The suite's tests wait on the wall clock (fire times), not the CPU:
	// run them all at once rather than GOMAXPROCS at a time, unless
	// -test.parallel was given.
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "32")
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).syncBlocks"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go.(*Conn).doReconnect"),
		goleak.IgnoreTopFunction("time.Sleep"),
	)
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

type natsDriver struct{}

func (natsDriver) Backend(*testing.T) schedulertest.Backend { return nil }

func (natsDriver) New(t *testing.T, nc *nats.Conn, _ schedulertest.Backend) scheduler.Scheduler {
	t.Helper()
	e, err := scheduler.NewNATS(nc, &scheduler.NATSConfig{Logger: quiet()})
	require.NoError(t, err)
	return e
}

type asynqDriver struct{}

func (asynqDriver) Backend(t *testing.T) schedulertest.Backend {
	t.Helper()
	return testutil.StartRedis(t)
}

func (asynqDriver) New(t *testing.T, nc *nats.Conn, b schedulertest.Backend) scheduler.Scheduler {
	t.Helper()
	r := b.(*testutil.Redis)
	e, err := scheduler.NewAsynq(nc, &scheduler.AsynqConfig{
		Redis:              asynq.RedisClientOpt{Addr: r.Addr()},
		Logger:             quiet(),
		RedisCheckInterval: 200 * time.Millisecond,
		StopTimeout:        5 * time.Second,
	})
	require.NoError(t, err)
	return e
}

func TestNATSEngine(t *testing.T) {
	t.Parallel()
	schedulertest.Run(t, natsDriver{})
}

func TestAsynqEngine(t *testing.T) {
	t.Parallel()
	schedulertest.Run(t, asynqDriver{})
}

// A service on asynq enqueues a toolq:submit task; it becomes a toolq job,
// run by a worker, and the task's result is the job's terminal event.
func TestAsynqIngress(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	nc := srv.Connect(t)
	w, err := worker.New(nc, &worker.Config{Logger: quiet(), Builtins: true})
	require.NoError(t, err)
	require.NoError(t, w.Start(testutil.Context(t, 10*time.Second)))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	r := testutil.StartRedis(t)
	redisOpt := asynq.RedisClientOpt{Addr: r.Addr()}
	e, err := scheduler.NewAsynq(nc, &scheduler.AsynqConfig{Redis: redisOpt, Logger: quiet()})
	require.NoError(t, err)
	require.NoError(t, e.Start(testutil.Context(t, 10*time.Second)))
	t.Cleanup(func() { _ = e.Stop(context.Background()) })

	client := asynq.NewClient(redisOpt)
	t.Cleanup(func() { _ = client.Close() })
	payload, err := json.Marshal(scheduler.SubmitPayload{Tool: worker.ToolNoop, Session: "svc", Input: json.RawMessage(`{"order":42}`)})
	require.NoError(t, err)
	info, err := client.Enqueue(asynq.NewTask(scheduler.TaskSubmit, payload), asynq.Queue(scheduler.DefaultQueue), asynq.Retention(time.Minute))
	require.NoError(t, err)

	insp := asynq.NewInspector(redisOpt)
	t.Cleanup(func() { _ = insp.Close() })
	var done *asynq.TaskInfo
	require.Eventually(t, func() bool {
		ti, err := insp.GetTaskInfo(scheduler.DefaultQueue, info.ID)
		if err == nil && ti.State == asynq.TaskStateCompleted {
			done = ti
			return true
		}
		return false
	}, 15*time.Second, 50*time.Millisecond)
	var ev contracts.Event
	require.NoError(t, json.Unmarshal(done.Result, &ev))
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	require.Equal(t, "asynq-"+info.ID, ev.Data.JobID)
	require.JSONEq(t, `{"order":42}`, string(ev.Data.Result))

	// The job is a toolq job like any other: its event is in the stream.
	p, err := producer.New(nc, &producer.Config{Logger: quiet()})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	got, err := p.Await(testutil.Context(t, 5*time.Second), "svc", "asynq-"+info.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, got.Data.Status)

	// no_wait: the task ends once the job is enqueued; its result is the job.
	quick, err := json.Marshal(scheduler.SubmitPayload{ID: "fire-and-forget", Tool: worker.ToolNoop, Session: "svc", NoWait: true})
	require.NoError(t, err)
	info, err = client.Enqueue(asynq.NewTask(scheduler.TaskSubmit, quick), asynq.Queue(scheduler.DefaultQueue), asynq.Retention(time.Minute))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ti, err := insp.GetTaskInfo(scheduler.DefaultQueue, info.ID)
		if err != nil || ti.State != asynq.TaskStateCompleted {
			return false
		}
		var j contracts.Job
		return json.Unmarshal(ti.Result, &j) == nil && j.ID == "fire-and-forget"
	}, 15*time.Second, 50*time.Millisecond)
	got, err = p.Await(testutil.Context(t, 5*time.Second), "svc", "fire-and-forget", nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, got.Data.Status)

	// An invalid job is not retried: the task is archived with the reason.
	bad, err := json.Marshal(scheduler.SubmitPayload{Tool: "not a tool"})
	require.NoError(t, err)
	info, err = client.Enqueue(asynq.NewTask(scheduler.TaskSubmit, bad), asynq.Queue(scheduler.DefaultQueue), asynq.MaxRetry(5))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ti, err := insp.GetTaskInfo(scheduler.DefaultQueue, info.ID)
		return err == nil && ti.State == asynq.TaskStateArchived && ti.Retried == 0
	}, 15*time.Second, 50*time.Millisecond)
}

func TestConfigRefused(t *testing.T) {
	t.Parallel()
	_, err := scheduler.NewAsynq(nil, &scheduler.AsynqConfig{})
	require.Error(t, err)
	_, err = scheduler.NewNATS(nil, nil)
	require.Error(t, err)
	// Stop before Start, twice, is harmless.
	srv := testutil.StartJetStream(t)
	e, err := scheduler.NewNATS(srv.Connect(t), &scheduler.NATSConfig{Logger: quiet()})
	require.NoError(t, err)
	require.NoError(t, e.Stop(context.Background()))
	require.NoError(t, e.Stop(context.Background()))
	<-e.Stopped()

	// A schedules stream without message schedules is refused by the NATS engine.
	js := testutil.JetStream(t, srv.Connect(t))
	_, err = js.CreateStream(testutil.Context(t, 5*time.Second), jetstream.StreamConfig{
		Name: contracts.Subjects{}.SchedulesStream(), Subjects: []string{"toolq.schedules.>"},
		Retention: jetstream.WorkQueuePolicy,
	})
	require.NoError(t, err)
	require.ErrorIs(t, e.Start(testutil.Context(t, 5*time.Second)), scheduler.ErrSchedulesDisabled,
		"Stop before Start does not keep it from starting")
	<-e.Stopped()
	require.NoError(t, e.Stop(context.Background()), "Stop after a failed Start is harmless")

	// Once the cause is gone, the failed Start can be retried.
	require.NoError(t, js.DeleteStream(testutil.Context(t, 5*time.Second), contracts.Subjects{}.SchedulesStream()))
	require.NoError(t, e.Start(testutil.Context(t, 10*time.Second)))
	require.ErrorContains(t, e.Start(testutil.Context(t, 5*time.Second)), "already started")
	require.NoError(t, e.Stop(testutil.Context(t, 10*time.Second)))
	<-e.Stopped()
}

// asynq's Scheduler enqueues every periodic tick once per instance: two
// engines handle about twice as many ticks as there are firings, and the
// jobs stream still holds one job per firing.
func TestAsynqDuplicateTicksDeduplicated(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	nc := srv.Connect(t)
	r := testutil.StartRedis(t)
	redisOpt := asynq.RedisClientOpt{Addr: r.Addr()}
	var engines []*scheduler.Asynq
	for range 2 {
		e, err := scheduler.NewAsynq(nc, &scheduler.AsynqConfig{Redis: redisOpt, Logger: quiet()})
		require.NoError(t, err)
		require.NoError(t, e.Start(testutil.Context(t, 10*time.Second)))
		t.Cleanup(func() { _ = e.Stop(context.Background()) })
		engines = append(engines, e)
	}
	s, err := engines[0].Create(testutil.Context(t, 5*time.Second), &scheduler.Schedule{ID: "dup", Every: time.Second, Job: scheduler.Job{Tool: "nobody.listens"}})
	require.NoError(t, err)

	js := testutil.JetStream(t, nc)
	insp := asynq.NewInspector(redisOpt)
	t.Cleanup(func() { _ = insp.Close() })
	var jobs, ticks int
	require.Eventually(t, func() bool {
		st, err := js.Stream(testutil.Context(t, 5*time.Second), contracts.Subjects{}.JobsStream())
		if err != nil {
			return false
		}
		info, err := st.Info(testutil.Context(t, 5*time.Second), jetstream.WithSubjectFilter(contracts.Subjects{}.Jobs()))
		if err != nil {
			return false
		}
		q, err := insp.GetQueueInfo(scheduler.DefaultQueue)
		if err != nil {
			return false
		}
		// On whichever session lane the schedule's session hashes to.
		jobs = 0
		for _, subject := range (contracts.Subjects{}).TenantJobLanes("", "nobody.listens", contracts.PriorityNormal) {
			jobs += int(info.State.Subjects[subject]) //nolint:gosec // G115: a count of a few messages
		}
		ticks = q.Processed
		return jobs >= 5
	}, 15*time.Second, 100*time.Millisecond)
	require.GreaterOrEqual(t, ticks, jobs+jobs/2, "ticks handled %d, jobs %d", ticks, jobs)
	info, err := engines[1].Get(testutil.Context(t, 5*time.Second), s.ID)
	require.NoError(t, err)
	require.False(t, info.LastFire.IsZero())
}
