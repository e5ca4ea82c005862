package contracts_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

func TestSubjects(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		s    contracts.Subjects
		want map[string]string
	}{
		{"zero value is the default prefix", contracts.Subjects{}, map[string]string{
			"jobs stream":    "TOOLQ_JOBS",
			"events stream":  "TOOLQ_EVENTS",
			"dlq stream":     "TOOLQ_DLQ",
			"runs bucket":    "toolq_runs",
			"snapshots":      "toolq_snapshots",
			"catalog":        "toolq_catalog",
			"cancels bucket": "toolq_cancels",
			"approvals":      "toolq_approvals",
			"exec policy":    "toolq_exec_policy",
			"schedules kv":   "toolq_schedules",
			"advisories":     "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.TOOLQ_JOBS.*",
			"job":            "toolq.jobs.code_mode.exec",
			"jobs":           "toolq.jobs.>",
			"schedules":      "toolq.schedules.>",
			"schedule":       "toolq.schedules.nightly",
			"event":          "toolq.events.s1.j1",
			"session events": "toolq.events.s1.*",
			"events":         "toolq.events.>",
			"dlq":            "toolq.dlq.exec",
			"dlqs":           "toolq.dlq.>",
			"cancel":         "toolq.cancel.j1",
			"cancels":        "toolq.cancel.*",
		}},
		{"explicit default", contracts.Subjects{Prefix: contracts.DefaultPrefix}, map[string]string{
			"jobs stream": "TOOLQ_JOBS",
			"job":         "toolq.jobs.code_mode.exec",
			"event":       "toolq.events.s1.j1",
		}},
		{"custom prefix", contracts.Subjects{Prefix: "Acme-q"}, map[string]string{
			"jobs stream":    "ACME-Q_JOBS",
			"events stream":  "ACME-Q_EVENTS",
			"dlq stream":     "ACME-Q_DLQ",
			"sched stream":   "ACME-Q_SCHEDULES",
			"runs bucket":    "acme-q_runs",
			"snapshots":      "acme-q_snapshots",
			"catalog":        "acme-q_catalog",
			"cancels bucket": "acme-q_cancels",
			"approvals":      "acme-q_approvals",
			"exec policy":    "acme-q_exec_policy",
			"schedules kv":   "acme-q_schedules",
			"advisories":     "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.ACME-Q_JOBS.*",
			"job":            "Acme-q.jobs.code_mode.exec",
			"jobs":           "Acme-q.jobs.>",
			"schedules":      "Acme-q.schedules.>",
			"schedule":       "Acme-q.schedules.nightly",
			"event":          "Acme-q.events.s1.j1",
			"session events": "Acme-q.events.s1.*",
			"events":         "Acme-q.events.>",
			"dlq":            "Acme-q.dlq.exec",
			"dlqs":           "Acme-q.dlq.>",
			"cancel":         "Acme-q.cancel.j1",
			"cancels":        "Acme-q.cancel.*",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := map[string]string{
				"jobs stream":    tc.s.JobsStream(),
				"events stream":  tc.s.EventsStream(),
				"dlq stream":     tc.s.DLQStream(),
				"sched stream":   tc.s.SchedulesStream(),
				"runs bucket":    tc.s.RunsBucket(),
				"snapshots":      tc.s.SnapshotsBucket(),
				"catalog":        tc.s.CatalogBucket(),
				"cancels bucket": tc.s.CancelsBucket(),
				"approvals":      tc.s.ApprovalsBucket(),
				"exec policy":    tc.s.ExecPolicyBucket(),
				"schedules kv":   tc.s.SchedulesBucket(),
				"advisories":     tc.s.MaxDeliveriesAdvisories(tc.s.JobsStream()),
				"job":            tc.s.Job("code_mode.exec"),
				"jobs":           tc.s.Jobs(),
				"schedules":      tc.s.Schedules(),
				"schedule":       tc.s.Schedule("nightly"),
				"event":          tc.s.Event("s1", "j1"),
				"session events": tc.s.SessionEvents("s1"),
				"events":         tc.s.Events(),
				"dlq":            tc.s.DLQ("exec"),
				"dlqs":           tc.s.DLQs(),
				"cancel":         tc.s.Cancel("j1"),
				"cancels":        tc.s.Cancels(),
			}
			for k, want := range tc.want {
				require.Equal(t, want, got[k], k)
			}
		})
	}
}

func TestKVNames(t *testing.T) {
	t.Parallel()
	runs := contracts.Subjects{Prefix: "acme"}.RunsBucket()
	require.Equal(t, "KV_acme_runs", contracts.KVStream(runs))
	require.Equal(t, "$KV.acme_runs.s1.r1", contracts.KVSubject(runs, "s1.r1"))
	require.Equal(t, "$KV.acme_runs.s1.*", contracts.KVSubject(runs, "s1.*"))
	require.Equal(t, "$KV.acme_runs.", contracts.KVSubject(runs, ""))
}

func TestSubjectsToolOf(t *testing.T) {
	t.Parallel()
	def, custom := contracts.Subjects{}, contracts.Subjects{Prefix: "acme"}
	for _, tc := range []struct {
		s       contracts.Subjects
		subject string
		want    string
	}{
		{def, "toolq.jobs.exec", "exec"},
		{def, "toolq.jobs.code_mode.exec", "code_mode.exec"},
		{def, def.Job("mcp.github.create_issue"), "mcp.github.create_issue"},
		{def, "toolq.jobs.", ""},
		{def, "toolq.jobs", ""},
		{def, "toolq.jobs.>", ""},
		{def, "toolq.jobs.*", ""},
		{def, "toolq.jobs.a..b", ""},
		{def, "toolq.events.s1.j1", ""},
		{def, "toolq.schedules.nightly", ""},
		{def, "toolqx.jobs.exec", ""},
		{def, "acme.jobs.exec", ""},
		{def, "", ""},
		{custom, "acme.jobs.exec", "exec"},
		{custom, custom.Job("code_mode.wait"), "code_mode.wait"},
		{custom, "toolq.jobs.exec", ""},
	} {
		require.Equal(t, tc.want, tc.s.ToolOf(tc.subject), "%q.ToolOf(%q)", tc.s.Prefix, tc.subject)
	}
	// ToolOf inverts Job for every valid tool.
	for _, tool := range []string{"exec", "code_execution", "code_mode.exec", "a-b.c_d.E9"} {
		require.Equal(t, tool, def.ToolOf(def.Job(tool)))
		require.Equal(t, tool, custom.ToolOf(custom.Job(tool)))
	}
}

func TestSubjectsConsumerName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		tool, want string
	}{
		{"exec", "worker_exec"},
		{"code_execution", "worker_code_execution"},
		{"code_mode.exec", "worker_code_mode:exec"},
		{"mcp.github.create-issue", "worker_mcp:github:create-issue"},
	} {
		for _, s := range []contracts.Subjects{{}, {Prefix: "acme"}} {
			got := s.ConsumerName(tc.tool)
			require.Equal(t, tc.want, got)
			// NATS refuses these in consumer names.
			require.NotContains(t, got, ".")
			require.NotContains(t, got, "*")
			require.NotContains(t, got, ">")
		}
	}
	// Tools that differ only in dots and underscores keep their own consumers.
	require.NotEqual(t, contracts.Subjects{}.ConsumerName("a.b"), contracts.Subjects{}.ConsumerName("a__b"))
	require.NotEqual(t, contracts.Subjects{}.ConsumerName("a.b"), contracts.Subjects{}.ConsumerName("a_b"))
}

func TestCancelKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ tenant, session, job, key string }{
		{"", "s1", "j1", "s1/j1"},
		{"ACME", "s1", "j1", "ACME.s1/j1"},
	} {
		key := contracts.CancelKey(tc.tenant, tc.session, tc.job)
		require.Equal(t, tc.key, key)
		tenant, session, job, ok := contracts.ParseCancelKey(key)
		require.True(t, ok, key)
		require.Equal(t, []string{tc.tenant, tc.session, tc.job}, []string{tenant, session, job})
	}
	for _, bad := range []string{"", "j1", "ACME.j1", "A.b.c/d", "/j1", "s1/", "s1/j1/x", "A./j", "s 1/j1", "A.s1/j*", ".s1/j1"} {
		_, _, _, ok := contracts.ParseCancelKey(bad)
		require.False(t, ok, bad)
	}
}
