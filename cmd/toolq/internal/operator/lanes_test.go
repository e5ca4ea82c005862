package operator

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
)

// TestRequeueGoesOnTheSessionsLane: a requeued dead letter goes where a
// producer would have put its job: its session's lane at its level, in
// its tenant's stream, whether the workers fold the lanes into the level's
// consumer or keep them apart (and when nobody consumes the level yet);
// only workers from before lanes (a level's consumer on the plain subject
// alone) get the plain subject.
func TestRequeueGoesOnTheSessionsLane(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	js := testutil.JetStream(t, srv.Connect(t))
	ctx := testutil.Context(t, 30*time.Second)
	cfg := bus.Config{Tenants: true}
	require.NoError(t, bus.Ensure(ctx, js, cfg))
	require.NoError(t, bus.AddTenant(ctx, js, cfg, contracts.TenantRecord{Name: "ACME"}))
	s := contracts.Subjects{}
	events, err := bus.NewEvents(ctx, js, s)
	require.NoError(t, err)
	q, err := OpenDLQ(ctx, js, s)
	require.NoError(t, err)

	session := ""
	for i := 0; session == ""; i++ {
		if c := fmt.Sprintf("s%d", i); contracts.LaneOf(c) != 0 {
			session = c
		}
	}
	lane := contracts.LaneOf(session)
	consumer := func(tenant, name string, filters ...string) {
		t.Helper()
		stream := s.JobsStream()
		if tenant != "" {
			stream = s.TenantJobsStream(tenant)
		}
		_, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: name, FilterSubjects: filters, AckPolicy: jetstream.AckExplicitPolicy,
		})
		require.NoError(t, err)
	}
	// The default tenant's workers: high folded, low from before lanes,
	// normal with lanes apart. ACME's: normal folded.
	consumer("", s.ConsumerNameAt("noop", contracts.PriorityHigh), s.TenantJobLanes("", "noop", contracts.PriorityHigh)...)
	consumer("", s.ConsumerNameAt("noop", contracts.PriorityLow), s.TenantJobAt("", "noop", contracts.PriorityLow))
	for l := range contracts.SessionLanes {
		consumer("", s.ConsumerNameLane("noop", contracts.PriorityNormal, l), s.TenantJobLane("", "noop", contracts.PriorityNormal, l))
	}
	consumer("ACME", s.ConsumerNameAt("noop", contracts.PriorityNormal), s.TenantJobLanes("ACME", "noop", contracts.PriorityNormal)...)

	for i, c := range []struct {
		tool, tenant string
		prio         contracts.Priority
		want         string
	}{
		{"noop", "", contracts.PriorityHigh, s.TenantJobLane("", "noop", contracts.PriorityHigh, lane)},
		{"noop", "", contracts.PriorityNormal, s.TenantJobLane("", "noop", contracts.PriorityNormal, lane)},
		{"noop", "", contracts.PriorityLow, s.TenantJobAt("", "noop", contracts.PriorityLow)},
		{"noop", "ACME", contracts.PriorityNormal, s.TenantJobLane("ACME", "noop", contracts.PriorityNormal, lane)},
		{"sleep", "", contracts.PriorityHigh, s.TenantJobLane("", "sleep", contracts.PriorityHigh, lane)}, // nobody consumes it yet
		{contracts.ToolExecDecide, "", contracts.PriorityNormal, s.TenantJobAt("", contracts.ToolExecDecide, contracts.PriorityNormal)},
	} {
		name := fmt.Sprintf("%s/%s/%s", c.tenant, c.tool, c.prio)
		id := fmt.Sprintf("dead-%d", i)
		body, err := json.Marshal(&contracts.Job{ID: id, Tool: c.tool, Session: session, Priority: c.prio})
		require.NoError(t, err)
		rec, err := json.Marshal(&contracts.DeadLetter{Job: body, JobID: id, Tool: c.tool, Session: session, Tenant: c.tenant, Priority: c.prio})
		require.NoError(t, err)
		ack, err := js.Publish(ctx, s.DLQ(c.tool), rec)
		require.NoError(t, err)
		d, err := q.Get(ctx, ack.Sequence)
		require.NoError(t, err)
		r, err := q.Requeue(ctx, d, events)
		require.NoError(t, err, name)
		require.Equal(t, c.want, r.Subject, name)
		stream := s.JobsStream()
		if c.tenant != "" {
			stream = s.TenantJobsStream(c.tenant)
		}
		st, err := js.Stream(ctx, stream)
		require.NoError(t, err)
		m, err := st.GetLastMsgForSubject(ctx, c.want)
		require.NoError(t, err, "%s: nothing on %s", name, c.want)
		job, err := contracts.DecodeJob(m.Data)
		require.NoError(t, err)
		require.Equal(t, r.RequeuedAs, job.ID, name)
	}
}
