package codemode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/tools/codemode"
	"github.com/toolq/toolq/worker"
)

// TestPoisonFailuresEndAtOnce: a run whose failure or output would make an
// event larger than a message fails at once, on its first attempt, with a
// cut error or output_limit_exceeded — it is never retried.
func TestPoisonFailuresEndAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", nil, nil)
	tests := []struct {
		name, code string
		wantCode   contracts.ErrorCode
		extra      map[string]any
	}{
		{"huge error", `throw new Error("y".repeat(1.2e7))`, "", nil},
		{"empty items", `for (;;) text("")`, contracts.CodeOutputLimitExceeded, nil},
		{
			"huge waiting result", `await tools.callValue("toolq:core:noop", {x: "z".repeat(2e6)})`, contracts.CodeOutputLimitExceeded,
			map[string]any{"autoResume": true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := b.exec(t, tt.code, tt.extra, nil)
			ev := b.await(t, job, true)
			require.Equal(t, contracts.StatusFailed, ev.Data.Status)
			require.Equal(t, 1, ev.Data.Attempt)
			r := result(t, ev.Data.Error.Details)
			require.Equal(t, string(tt.wantCode), r.Code, r.Error)
			require.LessOrEqual(t, len(r.Error), contracts.CodeModeMaxErrorBytes)
		})
	}
}

// snapshotOf reads the inline snapshot of a run's record.
func snapshotOf(t *testing.T, b *bundle, session, runID string) (map[string]any, uint64) {
	t.Helper()
	js := testutil.JetStream(t, b.srv.Connect(t))
	ctx := testutil.Context(t, 10*time.Second)
	kv, err := js.KeyValue(ctx, "toolq_runs")
	require.NoError(t, err)
	e, err := kv.Get(ctx, session+"."+runID)
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(e.Value(), &rec))
	require.NotEmpty(t, rec["snapshot"], "the snapshot is inline")
	return rec, e.Revision()
}

// TestSnapshotOfAnotherRunRefused: a signed snapshot of run A put into the
// record of run B is refused (it is bound to A's run id), not resumed as B.
func TestSnapshotOfAnotherRunRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", nil, nil)
	code := `const r = await yield_control(); return %q;`
	a := b.exec(t, fmt.Sprintf(code, "I am A"), nil, nil)
	bj := b.exec(t, fmt.Sprintf(code, "I am B"), nil, nil)
	require.Equal(t, contracts.StatusWaiting, b.await(t, a, true).Data.Status)
	require.Equal(t, contracts.StatusWaiting, b.await(t, bj, true).Data.Status)

	recA, _ := snapshotOf(t, b, a.Session, a.ID)
	recB, rev := snapshotOf(t, b, bj.Session, bj.ID)
	recB["snapshot"] = recA["snapshot"]
	data, err := json.Marshal(recB)
	require.NoError(t, err)
	js := testutil.JetStream(t, b.srv.Connect(t))
	kv, err := js.KeyValue(testutil.Context(t, 5*time.Second), "toolq_runs")
	require.NoError(t, err)
	_, err = kv.Update(testutil.Context(t, 5*time.Second), bj.Session+"."+bj.ID, data, rev)
	require.NoError(t, err)

	ev := b.wait(t, bj.Session, bj.ID)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status, string(ev.Data.Result))
	require.Equal(t, contracts.CodeInternalError, ev.Data.Error.Code)
	require.Contains(t, ev.Data.Error.Message, fmt.Sprintf("belongs to run %q", a.ID))
	ev = b.wait(t, a.Session, a.ID)
	require.JSONEq(t, `"I am A"`, string(result(t, ev.Data.Result).Value))
}

// TestSnapshotKeyRotationOnTheBus: a worker that lacks the key a run's
// snapshot was signed with fails it naming that key's id; a worker holding
// the old key as a verification key resumes it.
func TestSnapshotKeyRotationOnTheBus(t *testing.T) {
	t.Parallel()
	newEngine := func(cfg *sandbox.EngineConfig) *sandbox.Engine {
		cfg.PoolSize = 1
		e, err := sandbox.NewEngine(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = e.Close(context.Background()) })
		return e
	}
	oldKey := []byte("the old snapshot key of thirty-two bytes")
	newKey := []byte("the new snapshot key of thirty-two bytes")
	b := setup(t)
	a := b.startWorker(t, "A", &codemode.Config{Engine: newEngine(&sandbox.EngineConfig{SnapshotKey: oldKey, SnapshotKeyID: "old"})}, nil)
	code := `await yield_control(); return "resumed";`
	one := b.exec(t, code, nil, nil)
	two := b.exec(t, code, nil, nil)
	require.Equal(t, contracts.StatusWaiting, b.await(t, one, true).Data.Status)
	require.Equal(t, contracts.StatusWaiting, b.await(t, two, true).Data.Status)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, a.Stop(ctx))

	newOnly := b.startWorker(t, "B", &codemode.Config{Engine: newEngine(&sandbox.EngineConfig{SnapshotKey: newKey, SnapshotKeyID: "new"})}, nil)
	ev := b.wait(t, one.Session, one.ID)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Contains(t, ev.Data.Error.Message, `key id "old"`)
	require.NoError(t, newOnly.Stop(ctx))

	b.startWorker(t, "C", &codemode.Config{Engine: newEngine(&sandbox.EngineConfig{
		SnapshotKey: newKey, SnapshotKeyID: "new", SnapshotVerifyKeys: []sandbox.SnapshotKey{{ID: "old", Key: oldKey}},
	})}, nil)
	ev = b.wait(t, two.Session, two.ID)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	require.JSONEq(t, `"resumed"`, string(result(t, ev.Data.Result).Value))
}

// TestAutoResumeManyFastCalls: autoResume runs making fast nested calls one
// after another all complete. The record write after a resume used to lose
// its compare-and-set to the previous step's "submitted" write, the
// conflict was swallowed and the run stayed "resuming" until its TTL.
func TestAutoResumeManyFastCalls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", nil, nil)
	b.startWorker(t, "B", nil, nil)
	code := `let n = 0; for (let i = 0; i < 10; i++) n += (await tools.callValue("toolq:core:noop", {i})).i; return n;`
	jobs := make([]*contracts.Job, 0, 4)
	for range 4 {
		jobs = append(jobs, b.exec(t, code, map[string]any{"autoResume": true}, nil))
	}
	for _, job := range jobs {
		ev := b.await(t, job, false)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
		require.JSONEq(t, `45`, string(result(t, ev.Data.Result).Value))
	}
}

// TestAutoResumeYieldOnly: an autoResume run that only yields resumes at
// once — there is no nested call whose result would wake it.
func TestAutoResumeYieldOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", nil, nil)
	job := b.exec(t, `text("a"); await yield_control("one"); text("b"); await yield_control(); return "done";`,
		map[string]any{"autoResume": true}, nil)
	ev := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	r := result(t, ev.Data.Result)
	require.JSONEq(t, `"done"`, string(r.Value))
	require.Equal(t, 2, r.Telemetry.Resumes)
	require.Len(t, r.Output, 2)
}

// TestExpiredLeaseIsSwept: an autoResume run left "resuming" by a worker
// that died, with its results already recorded, is resumed by a live
// worker once the lease runs out — no trigger is left to do it.
func TestExpiredLeaseIsSwept(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	gate := func(w *worker.Worker) {
		require.NoError(t, w.Register("gate", worker.HandlerFunc(func(ctx context.Context, j *contracts.Job) (json.RawMessage, error) {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return j.Input, nil
		}), &worker.ToolConfig{Catalog: &contracts.CatalogTool{Description: "Echo when released."}}))
	}
	b.startWorker(t, "B", &codemode.Config{LeaseTTL: 300 * time.Millisecond}, gate)
	job := b.exec(t, `return (await tools.callValue("toolq:core:gate", {n: 7})).n;`, map[string]any{"autoResume": true}, nil)
	require.Equal(t, contracts.StatusWaiting, b.await(t, job, true).Data.Status)
	// A worker "A" holds the run's lease (as if it had begun a resume and
	// died) while the result comes back.
	js := testutil.JetStream(t, b.srv.Connect(t))
	ctx := testutil.Context(t, 10*time.Second)
	kv, err := js.KeyValue(ctx, "toolq_runs")
	require.NoError(t, err)
	key := job.Session + "." + job.ID
	e, err := kv.Get(ctx, key)
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(e.Value(), &rec))
	rec["status"] = "resuming"
	rec["lease"] = map[string]any{"owner": "A", "until": time.Now().Add(2 * time.Second)}
	data, err := json.Marshal(rec)
	require.NoError(t, err)
	_, err = kv.Update(ctx, key, data, e.Revision())
	require.NoError(t, err)
	close(release)

	final := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, final.Data.Status, string(final.Data.Result))
	require.JSONEq(t, `7`, string(result(t, final.Data.Result).Value))
}

// TestSweepResumesStalledRun: the sweep resumes an autoResume run whose
// results are recorded but which no trigger is left to resume: its
// resuming worker died after the trigger was acknowledged.
func TestSweepResumesStalledRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	never := func(w *worker.Worker) {
		require.NoError(t, w.Register("never", worker.HandlerFunc(func(ctx context.Context, _ *contracts.Job) (json.RawMessage, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}), &worker.ToolConfig{Catalog: &contracts.CatalogTool{Description: "Never answers."}}))
	}
	b.startWorker(t, "B", &codemode.Config{LeaseTTL: 200 * time.Millisecond, SweepInterval: 100 * time.Millisecond}, never)
	job := b.exec(t, `return (await tools.callValue("toolq:core:never", {})).n;`, map[string]any{"autoResume": true}, nil)
	require.Equal(t, contracts.StatusWaiting, b.await(t, job, true).Data.Status)
	js := testutil.JetStream(t, b.srv.Connect(t))
	ctx := testutil.Context(t, 10*time.Second)
	kv, err := js.KeyValue(ctx, "toolq_runs")
	require.NoError(t, err)
	key := job.Session + "." + job.ID
	e, err := kv.Get(ctx, key)
	require.NoError(t, err)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(e.Value(), &rec))
	rec["results"] = []map[string]any{{"callId": "call_1", "value": map[string]any{"n": 9}, "at": time.Now()}}
	rec["status"] = "resuming"
	rec["lease"] = map[string]any{"owner": "A", "until": time.Now().Add(-time.Second)}
	data, err := json.Marshal(rec)
	require.NoError(t, err)
	_, err = kv.Update(ctx, key, data, e.Revision())
	require.NoError(t, err)

	final := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, final.Data.Status, string(final.Data.Result))
	require.JSONEq(t, `9`, string(result(t, final.Data.Result).Value))
}
