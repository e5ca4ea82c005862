package worker_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/worker"
)

// A fresh jobs stream refuses message schedules: a Nats-Schedule header may
// target any subject of its stream, exec.decide included (attack 5).
func TestJobsStreamRefusesMessageSchedules(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, withBuiltins, nil)
	ctx := testutil.Context(t, 10*time.Second)
	s := contracts.Subjects{}
	st, err := b.js.Stream(ctx, s.JobsStream())
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	require.False(t, cfg.AllowMsgSchedules)
	require.Equal(t, []string{s.Jobs()}, cfg.Subjects)
	require.Equal(t, jetstream.DiscardNew, cfg.Discard, "a full jobs stream refuses submits, never drops a queued job")
	require.Positive(t, cfg.MaxBytes)

	sched, err := b.js.Stream(ctx, s.SchedulesStream())
	require.NoError(t, err)
	require.True(t, sched.CachedInfo().Config.AllowMsgSchedules)
	require.Equal(t, []string{s.Schedules()}, sched.CachedInfo().Config.Subjects)

	msg := scheduleMsg(s.Job(worker.ToolNoop), s.Job(contracts.ToolExecDecide), `{}`)
	_, err = b.js.PublishMsg(ctx, msg)
	require.ErrorContains(t, err, "schedules")
	// Nor can the schedules stream aim a schedule at the jobs.
	msg = scheduleMsg(s.Schedule("x"), s.Job(worker.ToolNoop), `{}`)
	_, err = b.js.PublishMsg(ctx, msg)
	require.Error(t, err)
}

// A jobs stream made before the schedules stream existed held the schedule
// subjects and allowed message schedules. Ensure moves the schedules out
// (they are materialized again from their bucket), and since the server
// cannot turn schedules off on it, the worker refuses every job the server
// fired from one: into the DLQ, with no event in the session it names.
func TestLegacyJobsStreamMigratesAndFiredCopiesAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testutil.Context(t, 30*time.Second)
	s := contracts.Subjects{}
	_, err := b.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: s.JobsStream(), Subjects: []string{s.Jobs(), s.Schedules()},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
		AllowMsgSchedules: true, AllowMsgTTL: true, Duplicates: 2 * time.Minute,
	})
	require.NoError(t, err)
	_, err = b.js.CreateOrUpdateConsumer(ctx, s.JobsStream(), jetstream.ConsumerConfig{
		Durable: bus.LegacyRelayConsumer, FilterSubject: s.Schedule("fire") + ".*", AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	_, err = b.js.PublishMsg(ctx, scheduleMsg(s.Schedule("old"), s.Schedule("fire")+".old", `{}`))
	require.NoError(t, err)

	b.startWorker(t, withBuiltins, nil) // runs bus.Ensure

	st, err := b.js.Stream(ctx, s.JobsStream())
	require.NoError(t, err)
	cfg := st.CachedInfo().Config
	require.Equal(t, []string{s.Jobs()}, cfg.Subjects)
	require.True(t, cfg.AllowMsgSchedules, "the server cannot turn message schedules off")
	require.Zero(t, st.CachedInfo().State.Msgs, "the old schedule message went with its subject")
	_, err = b.js.Consumer(ctx, s.JobsStream(), bus.LegacyRelayConsumer)
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound)
	_, err = b.js.Stream(ctx, s.SchedulesStream())
	require.NoError(t, err)

	// The side door of such a stream: a schedule aimed at a victim's job.
	victim := contracts.Job{ID: "victim-1", Tool: worker.ToolNoop, Session: "victim", CreatedAt: time.Now()}
	body, err := json.Marshal(victim)
	require.NoError(t, err)
	at := "@at " + time.Now().Add(-time.Second).UTC().Format(time.RFC3339)
	msg := scheduleMsg(s.Job("sched-door"), s.Job(worker.ToolNoop), string(body))
	msg.Header.Set("Nats-Schedule", at)
	_, err = b.js.PublishMsg(ctx, msg)
	require.NoError(t, err, "the legacy stream still takes the schedule")

	dlq, err := b.js.Stream(ctx, s.DLQStream())
	require.NoError(t, err)
	var dl *jetstream.RawStreamMsg
	require.Eventually(t, func() bool {
		dl, err = dlq.GetLastMsgForSubject(ctx, s.DLQ(worker.ToolNoop))
		return err == nil
	}, 20*time.Second, 50*time.Millisecond, "the fired copy is dead-lettered")
	var letter contracts.DeadLetter
	require.NoError(t, json.Unmarshal(dl.Data, &letter))
	require.Contains(t, letter.Error.Message, "message schedule")

	// No event for the job the fired copy named.
	ev, err := b.js.Stream(ctx, s.EventsStream())
	require.NoError(t, err)
	_, err = ev.GetLastMsgForSubject(ctx, s.Event(victim.Session, victim.ID))
	require.ErrorIs(t, err, jetstream.ErrMsgNotFound)
}

func scheduleMsg(subject, target, body string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = []byte(body)
	m.Header.Set("Nats-Schedule", "@every 1h")
	m.Header.Set("Nats-Schedule-Target", target)
	return m
}
