package producer_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
)

// serve makes the consumer the first worker of tool makes.
func (b *bundle) serve(t *testing.T, tool string) {
	t.Helper()
	b.serveTB(t, tool)
}

func (b *bundle) serveTB(tb testing.TB, tool string) {
	tb.Helper()
	s := contracts.Subjects{}
	_, err := b.js.CreateOrUpdateConsumer(testutil.Context(tb, 5*time.Second), s.JobsStream(), jetstream.ConsumerConfig{
		Durable: s.ConsumerName(tool), FilterSubject: s.Job(tool), AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(tb, err)
}

// A job for a tool no worker has ever served is refused at submit, with the
// tools that are served; nothing is enqueued.
func TestSubmitUnservedTool(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p, err := producer.New(b.nc, &producer.Config{Session: "p", Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	ctx := testutil.Context(t, 10*time.Second)

	_, err = p.Submit(ctx, "nosuchtool", nil, nil)
	require.ErrorIs(t, err, producer.ErrToolNotServed)
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
	require.ErrorContains(t, err, `no worker serves tool "nosuchtool"; served: none`)

	b.serve(t, "noop")
	b.serve(t, "code_mode.exec")
	_, err = p.Submit(ctx, "nosuchtool", json.RawMessage(`{}`), nil)
	require.ErrorIs(t, err, producer.ErrToolNotServed)
	require.ErrorContains(t, err, "served: code_mode.exec, noop")
	st, err := b.js.Stream(ctx, contracts.Subjects{}.JobsStream())
	require.NoError(t, err)
	require.Zero(t, st.CachedInfo().State.Msgs, "a refused job is not enqueued")

	job, err := p.Submit(ctx, "code_mode.exec", json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	require.Equal(t, job.ID, b.enqueued(t, "code_mode.exec").ID)

	// A tool found served is remembered: its next submits ask nothing,
	// even once the consumer is gone.
	require.NoError(t, b.js.DeleteConsumer(ctx, contracts.Subjects{}.JobsStream(), contracts.Subjects{}.ConsumerName("code_mode.exec")))
	_, err = p.Submit(ctx, "code_mode.exec", nil, nil)
	require.NoError(t, err)

	// Opting out submits anyway.
	unchecked, err := producer.New(b.nc, &producer.Config{Session: "p", Logger: quiet, SubmitUnserved: true})
	require.NoError(t, err)
	t.Cleanup(unchecked.Close)
	_, err = unchecked.Submit(ctx, "nosuchtool", nil, nil)
	require.NoError(t, err)

	_, err = producer.New(b.nc, &producer.Config{ServedTTL: -time.Second})
	require.Error(t, err)
}

// BenchmarkSubmit is one submit with the served check (cached after the
// first) and without it.
func BenchmarkSubmit(b *testing.B) {
	srv := testutil.StartJetStream(b)
	nc := srv.Connect(b)
	js := testutil.JetStream(b, nc)
	cfg, err := bus.Config{}.WithDefaults()
	require.NoError(b, err)
	require.NoError(b, bus.Ensure(testutil.Context(b, 10*time.Second), js, cfg))
	bb := &bundle{nc: nc, js: js}
	bb.serveTB(b, "bench")
	for _, unchecked := range []bool{false, true} {
		name := "checked"
		if unchecked {
			name = "unchecked"
		}
		b.Run(name, func(b *testing.B) {
			p, err := producer.New(nc, &producer.Config{Logger: quiet, SubmitUnserved: unchecked})
			require.NoError(b, err)
			defer p.Close()
			ctx := testutil.Context(b, time.Minute)
			in := json.RawMessage(`{}`)
			b.ResetTimer()
			for range b.N {
				if _, err := p.Submit(ctx, "bench", in, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A producer puts a job on its session's lane only when the tool's workers
// take lanes (their level's consumer filters every lane, or lane 1 has its
// own); against workers from before lanes it stays on the plain subject,
// where they take it.
func TestSubmitLanesFollowWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p, err := producer.New(b.nc, &producer.Config{Session: "b", Logger: quiet}) // lane 1
	require.NoError(t, err)
	t.Cleanup(p.Close)
	ctx := testutil.Context(t, 10*time.Second)
	s := contracts.Subjects{}
	require.Equal(t, 1, contracts.LaneOf("b"))

	b.serve(t, "old") // its filter: the plain subject only
	_, err = b.js.CreateOrUpdateConsumer(ctx, s.JobsStream(), jetstream.ConsumerConfig{
		Durable: s.ConsumerName("folded"), FilterSubjects: s.TenantJobLanes("", "folded", contracts.PriorityNormal), AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	for lane := range contracts.SessionLanes {
		_, err = b.js.CreateOrUpdateConsumer(ctx, s.JobsStream(), jetstream.ConsumerConfig{
			Durable: s.ConsumerNameLane("apart", contracts.PriorityNormal, lane), FilterSubject: s.JobLane("apart", contracts.PriorityNormal, lane), AckPolicy: jetstream.AckExplicitPolicy,
		})
		require.NoError(t, err)
	}
	for tool, want := range map[string]string{
		"old":    "toolq.jobs.old",
		"folded": "toolq.jobs.~s1.folded",
		"apart":  "toolq.jobs.~s1.apart",
	} {
		_, err := p.Submit(ctx, tool, nil, nil)
		require.NoError(t, err, tool)
		st, err := b.js.Stream(ctx, s.JobsStream())
		require.NoError(t, err)
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(s.Jobs()))
		require.NoError(t, err)
		require.Equal(t, uint64(1), info.State.Subjects[want], "%s: %v", tool, info.State.Subjects)
	}
	// A guarded tool stays on its plain subject even where lanes are taken.
	_, err = b.js.CreateOrUpdateConsumer(ctx, s.JobsStream(), jetstream.ConsumerConfig{
		Durable: s.ConsumerName(contracts.ToolExecDecide), FilterSubjects: s.TenantJobLanes("", contracts.ToolExecDecide, contracts.PriorityNormal), AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	_, err = p.Submit(ctx, contracts.ToolExecDecide, json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	st, err := b.js.Stream(ctx, s.JobsStream())
	require.NoError(t, err)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(s.Jobs()))
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Subjects[s.Job(contracts.ToolExecDecide)], "%v", info.State.Subjects)
}
