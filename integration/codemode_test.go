package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
)

func execJob(t *testing.T, e *env, in map[string]any) *contracts.Job {
	t.Helper()
	data, err := json.Marshal(in)
	require.NoError(t, err)
	job, err := e.prod.Submit(ctxFor(t, 10*time.Second), contracts.ToolCodeModeExec, data, nil)
	require.NoError(t, err)
	return job
}

// A run suspends on worker process A; A is killed; worker process B
// resumes it from the snapshot in NATS when `wait` asks.
func TestRunSuspendedOnAResumedOnB(t *testing.T) { //nolint:paralleltest // SIGKILLs worker processes; its nats-server binds a port from FreePort, which can race with another test's pick
	e := setup(t)
	a := startWorker(t, e.srv.URL(), "A", e.keyFile)
	ctx := ctxFor(t, 90*time.Second)
	job := execJob(t, e, map[string]any{
		"code": `const r = await tools.callValue("toolq:core:noop", {v: 20}); text("resumed"); return r.v + 22;`,
	})
	ev, err := e.prod.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
	require.NoError(t, err)
	require.Equal(t, contracts.StatusWaiting, ev.Data.Status)
	require.True(t, strings.HasSuffix(ev.Source, "/A"))
	// Let the nested call finish before A goes, so the run is resumable.
	require.Eventually(t, func() bool {
		n, err := e.prod.Await(ctx, job.Session, job.ID+"-call_1", nil)
		return err == nil && n.Data.Status == contracts.StatusCompleted
	}, 30*time.Second, 50*time.Millisecond)
	a.kill()

	startWorker(t, e.srv.URL(), "B", e.keyFile)
	in, _ := json.Marshal(map[string]string{"runId": job.ID})
	w, err := e.prod.Submit(ctx, contracts.ToolCodeModeWait, in, nil)
	require.NoError(t, err)
	wev, err := e.prod.Await(ctx, w.Session, w.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, wev.Data.Status, string(wev.Data.Result))
	var res struct {
		Status string            `json:"status"`
		Value  json.RawMessage   `json:"value"`
		Output []json.RawMessage `json:"output"`
	}
	require.NoError(t, json.Unmarshal(wev.Data.Result, &res))
	require.Equal(t, "completed", res.Status)
	require.JSONEq(t, `42`, string(res.Value))
	require.Len(t, res.Output, 1)
	final, err := e.prod.Await(ctx, job.Session, job.ID, nil)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(final.Source, "/B"), final.Source)
}

// The worker holding a run's resume lease is killed mid-resume: the other
// worker takes the run over when the lease runs out, and the run completes
// once.
func TestResumeLeaseHolderKilled(t *testing.T) { //nolint:paralleltest // SIGKILLs worker processes on 2s lease timings; its nats-server binds a port from FreePort, which can race with another test's pick
	e := setup(t)
	workers := map[string]*proc{
		"A": startWorker(t, e.srv.URL(), "A", e.keyFile),
		"B": startWorker(t, e.srv.URL(), "B", e.keyFile),
	}
	ctx := ctxFor(t, 120*time.Second)
	job := execJob(t, e, map[string]any{
		"code":       `await tools.callValue("toolq:core:noop", {}); const t0 = Date.now(); while (Date.now() - t0 < 3000) {} return "done";`,
		"autoResume": true,
	})
	js, err := jetstream.New(e.nc)
	require.NoError(t, err)
	var kv jetstream.KeyValue
	require.Eventually(t, func() bool {
		kv, err = js.KeyValue(ctx, "toolq_runs")
		return err == nil
	}, 30*time.Second, 20*time.Millisecond)
	// Find the worker that holds the lease while it resumes, and kill it.
	var holder string
	require.Eventually(t, func() bool {
		en, err := kv.Get(ctx, job.Session+"."+job.ID)
		if err != nil {
			return false
		}
		var rec struct {
			Status string `json:"status"`
			Lease  *struct {
				Owner string `json:"owner"`
			} `json:"lease"`
		}
		if json.Unmarshal(en.Value(), &rec) != nil || rec.Status != "resuming" || rec.Lease == nil {
			return false
		}
		holder = rec.Lease.Owner
		return true
	}, 30*time.Second, 10*time.Millisecond)
	require.Contains(t, workers, holder)
	workers[holder].kill()
	other := "A"
	if holder == "A" {
		other = "B"
	}
	final, err := e.prod.Await(ctx, job.Session, job.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, final.Data.Status, string(final.Data.Result))
	require.True(t, strings.HasSuffix(final.Source, "/"+other), final.Source)
	terminal := 0
	require.NoError(t, e.prod.ReadEvents(ctx, job.Session, &producer.ReadOpts{JobID: job.ID}, func(ev *contracts.Event) error {
		if ev.Data.Status.Terminal() {
			terminal++
		}
		return nil
	}))
	require.Equal(t, 1, terminal)
}
