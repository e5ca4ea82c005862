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
	"github.com/toolq/toolq/producer"
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
	ctx := testutil.Context(t, 10*time.Second)
	run := b.readRun(ctx, t, job)
	run.rec["status"] = "resuming"
	run.rec["lease"] = map[string]any{"owner": "A", "until": time.Now().Add(2 * time.Second)}
	run.update(ctx, t)
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
	ctx := testutil.Context(t, 10*time.Second)
	run := b.readRun(ctx, t, job)
	run.rec["results"] = []map[string]any{{"callId": "call_1", "value": map[string]any{"n": 9}, "at": time.Now()}}
	run.rec["status"] = "resuming"
	run.rec["lease"] = map[string]any{"owner": "A", "until": time.Now().Add(-time.Second)}
	run.update(ctx, t)

	final := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, final.Data.Status, string(final.Data.Result))
	require.JSONEq(t, `9`, string(result(t, final.Data.Result).Value))
}

// TestExecSubmittedAgainPastDuplicateWindow: an exec job submitted again
// with the id of a run still waiting, after the stream's duplicate window
// let it in, is a first delivery that finds the run's record when it writes
// it: it answers as the run stands (waiting) and touches neither the record
// nor the snapshot, inline or in the object store, so the run completes
// once, with its own answer.
func TestExecSubmittedAgainPastDuplicateWindow(t *testing.T) {
	t.Parallel()
	for name, inline := range map[string]int{"inline snapshot": 0, "snapshot object": 1} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := testutil.Context(t, 30*time.Second)
			js := testutil.JetStream(t, b.srv.Connect(t))
			b.startWorker(t, "A", &codemode.Config{InlineSnapshotBytes: inline}, nil)
			st, err := js.Stream(ctx, contracts.Subjects{}.JobsStream())
			require.NoError(t, err)
			cfg := st.CachedInfo().Config
			cfg.Duplicates = 100 * time.Millisecond
			_, err = js.UpdateStream(ctx, cfg)
			require.NoError(t, err)
			require.NoError(t, b.prod.RegisterClientTool(ctx, contracts.CatalogTool{ID: "client:app:ask", Name: "ask", Description: "Ask."}))
			in := map[string]any{"code": `const n = Date.now(); const a = await tools.callValue("client:app:ask", {n}); return {n, a};`, "autoResume": true}
			job := b.exec(t, in["code"].(string), map[string]any{"autoResume": true}, &producer.SubmitOpts{ID: "dup-run"})
			first := b.await(t, job, true)
			require.Equal(t, contracts.StatusWaiting, first.Data.Status, "%s %+v", first.Data.Result, first.Data.Error)
			var w contracts.CodeModeResult
			require.NoError(t, json.Unmarshal(first.Data.Result, &w))
			require.Len(t, w.PendingToolCalls, 1)

			// Past the window, the same job is taken again.
			data, err := json.Marshal(in)
			require.NoError(t, err)
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, err := b.prod.Submit(ctx, contracts.ToolCodeModeExec, data, &producer.SubmitOpts{ID: "dup-run", Session: job.Session})
				if err == nil {
					break
				}
				require.ErrorIs(t, err, producer.ErrDuplicate)
				require.True(t, time.Now().Before(deadline), "the duplicate window did not pass")
				time.Sleep(50 * time.Millisecond)
			}
			// Its delivery answers waiting again, from the record (that
			// event has the first one's id: the events stream keeps one), and
			// the job leaves the queue; nothing failed.
			cons, err := st.Consumer(ctx, contracts.Subjects{}.ConsumerName(contracts.ToolCodeModeExec))
			require.NoError(t, err)
			for {
				info, err := cons.Info(ctx)
				require.NoError(t, err)
				if info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Consumer >= 2 {
					require.Zero(t, info.NumRedelivered, "answered on its first delivery")
					break
				}
				require.True(t, time.Now().Before(deadline.Add(10*time.Second)), "the second delivery was not answered: %+v", info)
				time.Sleep(20 * time.Millisecond)
			}
			last, err := b.prod.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
			require.NoError(t, err)
			require.Equal(t, contracts.StatusWaiting, last.Data.Status)
			p := w.PendingToolCalls[0]
			require.NoError(t, b.prod.SubmitToolResult(ctx, job.Session, job.ID, p, json.RawMessage(`"yes"`), nil))
			final := b.await(t, job, false)
			require.Equal(t, contracts.StatusCompleted, final.Data.Status, "%s %+v", final.Data.Result, final.Data.Error)
			// The first run's VM state: the second exec's snapshot (a later
			// Date.now) did not replace it.
			var asked struct{ N int64 }
			require.NoError(t, json.Unmarshal(p.Input, &asked))
			require.JSONEq(t, fmt.Sprintf(`{"n":%d,"a":"yes"}`, asked.N), string(result(t, final.Data.Result).Value))
		})
	}
}
