package codemode_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

// levelTool registers "lvl", which answers the level and tenant its job
// came with: the worker reads both from the subject the job arrived on.
func levelTool(w *worker.Worker) {
	err := w.Register("lvl", worker.HandlerFunc(func(_ context.Context, j *contracts.Job) (json.RawMessage, error) {
		return json.Marshal(map[string]string{"p": string(j.Priority), "t": j.Tenant})
	}), &worker.ToolConfig{Catalog: &contracts.CatalogTool{Description: "Say the job's level."}})
	if err != nil {
		panic(err)
	}
}

// twoCalls makes a nested call in the exec and another in the resume that
// the first one's result brings (autoResume), so both submit paths are seen.
const twoCalls = `const a = await tools.callValue("toolq:core:lvl", {});
const b = await tools.callValue("toolq:core:lvl", {});
return [a, b];`

// TestNestedCallsInheritRunPriority: a run's nested calls go at the level
// of the subject its code_mode.exec job arrived on, in its exec and in its
// resume; a tenant's high run's calls go on the tenant's high subject and
// stay in the tenant; a run at normal keeps normal.
func TestNestedCallsInheritRunPriority(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testutil.Context(t, 30*time.Second)
	js := testutil.JetStream(t, b.srv.Connect(t))
	require.NoError(t, bus.AddTenant(ctx, js, bus.Config{}, contracts.TenantRecord{Name: "ACME"}))
	b.startWorkerWith(t, &worker.Config{Name: "A", Tenants: true}, nil, levelTool)
	want := func(p, tenant string) string {
		one := `{"p":"` + p + `","t":"` + tenant + `"}`
		return "[" + one + "," + one + "]"
	}

	for _, tc := range []struct {
		prio contracts.Priority
		want string
	}{
		{contracts.PriorityHigh, "high"},
		{contracts.PriorityLow, "low"},
		{"", "normal"},
	} {
		job := b.exec(t, twoCalls, map[string]any{"autoResume": true}, &producer.SubmitOpts{Priority: tc.prio})
		ev := b.await(t, job, false)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
		require.JSONEq(t, want(tc.want, ""), string(result(t, ev.Data.Result).Value), "run at %q", tc.prio)
	}

	// ACME's run at high: its calls on ACME's high subject, in ACME's stream.
	job := codeJob("acme-high", contracts.ToolCodeModeExec, "acme-s", map[string]any{"code": twoCalls, "autoResume": true})
	_, err := js.Publish(ctx, contracts.Subjects{}.TenantJobAt("ACME", job.Tool, contracts.PriorityHigh), mustJSON(t, job), jetstream.WithMsgID(job.ID))
	require.NoError(t, err)
	ev := b.tenantEvent(t, "ACME", "acme-s", "acme-high", terminal)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	require.JSONEq(t, want("high", "ACME"), string(result(t, ev.Data.Result).Value))
	st, err := js.Stream(ctx, contracts.Subjects{}.EventsStream())
	require.NoError(t, err)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(contracts.Subjects{}.Event("acme-s", ">")))
	require.NoError(t, err)
	require.Empty(t, info.State.Subjects, "a tenant's run wrote events of the default tenant")
}
