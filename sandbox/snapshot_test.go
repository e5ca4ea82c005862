package sandbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/sandbox/internal/engine"
)

const threeCalls = `
const p1 = tools.callValue("client:app:slow_add", {a: 1, b: 2});
const p2 = tools.callValue("client:app:slow_add", {a: 3, b: 4});
const p3 = tools.callValue("client:app:slow_add", {a: 5, b: 6});
`

// TestSuspendResume suspends runs on three pending calls, snapshots them,
// restores them in fresh instances and settles the calls in an order other
// than the call order: all at once, or one per resume (a new snapshot
// between each). Both must give what the JavaScript semantics give for that
// arrival order without any snapshot.
func TestSuspendResume(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		code    string
		settle  []sandbox.Settlement // in arrival order
		want    string
		wantErr string
	}{
		{
			name: "Promise.all",
			code: threeCalls + `
const order = [];
p1.then(() => order.push(1)); p2.then(() => order.push(2)); p3.then(() => order.push(3));
const all = await Promise.all([p1, p2, p3]);
return {all, order};`,
			settle: []sandbox.Settlement{ok("call_3", 11), ok("call_1", 3), ok("call_2", 7)},
			want:   `{"all":[3,7,11],"order":[3,1,2]}`,
		},
		{
			name:   "Promise.race",
			code:   threeCalls + `return await Promise.race([p1, p2, p3]);`,
			settle: []sandbox.Settlement{ok("call_2", 7), ok("call_3", 11), ok("call_1", 3)},
			want:   `7`,
		},
		{
			name: "for await",
			code: threeCalls + `
const out = [];
for await (const v of [p1, p2, p3]) out.push(v);
return out;`,
			settle: []sandbox.Settlement{ok("call_3", 11), ok("call_2", 7), ok("call_1", 3)},
			want:   `[3,7,11]`,
		},
		{
			name: "try/catch around a failing tool",
			code: threeCalls + `
const out = [];
for (const p of [p1, p2, p3]) {
  try { out.push(await p); } catch (e) { out.push("caught " + e.name + ": " + e.message + " " + (e instanceof Error)); }
}
return out;`,
			settle: []sandbox.Settlement{ok("call_2", 7), bad("call_1", "slow_add is down"), ok("call_3", 11)},
			want:   `["caught Error: slow_add is down true",7,11]`,
		},
		{
			name:   "Promise.allSettled and call envelopes",
			code:   `return await Promise.allSettled([tools.call("client:app:slow_add", {}), tools.callValue("client:app:slow_add", {})]);`,
			settle: []sandbox.Settlement{bad("call_2", "nope"), ok("call_1", "yes")},
			want:   `[{"status":"fulfilled","value":{"ok":true,"value":"yes"}},{"status":"rejected","reason":{}}]`,
		},
		{
			name:    "uncaught tool failure fails the run",
			code:    threeCalls + `return await Promise.all([p1, p2, p3]);`,
			settle:  []sandbox.Settlement{ok("call_3", 11), bad("call_2", "broken"), ok("call_1", 3)},
			wantErr: "Error: broken",
		},
		{
			name: "state and output survive",
			code: `let counter = 0; const m = new Map([["k", {deep: [1, 2]}]]);
text("before");
const v = await tools.callValue("client:app:slow_add", {a: 1, b: 1});
counter += v;
text("after " + counter);
return {counter, deep: m.get("k").deep};`,
			settle: []sandbox.Settlement{ok("call_1", 2)},
			want:   `{"counter":2,"deep":[1,2]}`,
		},
	}
	for _, tt := range tests {
		for _, mode := range []string{"all at once", "one per resume"} {
			t.Run(tt.name+"/"+mode, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				out := b.exec(t, tt.code, sandbox.Limits{})
				require.Equal(t, sandbox.StatusWaiting, out.Result.Status, "error: %s", out.Result.Error)
				require.Equal(t, sandbox.ReasonPendingTools, out.Result.Reason)
				require.Equal(t, "run-1", out.Result.RunID)
				require.NotEmpty(t, out.Snapshot)
				require.Len(t, out.Result.PendingToolCalls, len(tt.settle))
				if mode == "all at once" {
					out = b.resume(t, out.Snapshot, tt.settle...)
				} else {
					for i, s := range tt.settle {
						out = b.resume(t, out.Snapshot, s)
						if out.Result.Status != sandbox.StatusWaiting {
							break
						}
						require.Len(t, out.Result.PendingToolCalls, len(tt.settle)-i-1)
						require.Equal(t, i+1, out.Result.Telemetry.Resumes)
					}
				}
				if tt.wantErr != "" {
					requireFailed(t, out, "", tt.wantErr)
					return
				}
				requireCompleted(t, out, tt.want)
			})
		}
	}
}

func TestSuspendDetails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := b.exec(t, `text("start"); const v = await tools.slow_add({a: 2, b: 3}); text("got " + v); return v * 10`, sandbox.Limits{})
	require.Equal(t, sandbox.StatusWaiting, out.Result.Status, out.Result.Error)
	require.Equal(t, []sandbox.PendingToolCall{{
		CallID: "call_1", ToolID: "client:app:slow_add", Source: "client", Input: json.RawMessage(`{"a":2,"b":3}`),
	}}, out.Result.PendingToolCalls)
	require.Equal(t, []sandbox.Output{{Type: "text", Text: "start"}}, out.Result.Output)
	require.Positive(t, out.Result.Telemetry.SnapshotBytes)
	require.Len(t, b.bridge.calls, 1)
	require.Equal(t, "run-1", b.bridge.calls[0].RunID)

	// A snapshot is immutable: resuming it twice gives the same result.
	for range 2 {
		done := b.resume(t, out.Snapshot, ok("call_1", 5))
		requireCompleted(t, done, `50`)
		require.Equal(t, []sandbox.Output{{Type: "text", Text: "start"}, {Type: "text", Text: "got 5"}}, done.Result.Output)
		require.Equal(t, 1, done.Result.Telemetry.Resumes)
		require.Equal(t, 1, done.Result.Telemetry.NestedCalls)
	}

	// Unknown and duplicate call ids are refused before the VM runs.
	requireFailed(t, b.resume(t, out.Snapshot, ok("call_9", 1)), "invalid_input", "unknown or already settled")
	requireFailed(t, b.resume(t, out.Snapshot, ok("call_1", 1), ok("call_1", 2)), "invalid_input", "unknown or already settled")
	// No settlement: still waiting, on the same call.
	again := b.resume(t, out.Snapshot)
	require.Equal(t, sandbox.StatusWaiting, again.Result.Status)
	require.Equal(t, "call_1", again.Result.PendingToolCalls[0].CallID)
}

func TestYieldControl(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := b.exec(t, `text("one"); await yield_control("checkpoint"); text("two"); await yield_control(); return "end"`, sandbox.Limits{})
	require.Equal(t, sandbox.StatusWaiting, out.Result.Status, out.Result.Error)
	require.Equal(t, sandbox.ReasonYield, out.Result.Reason)
	require.Empty(t, out.Result.PendingToolCalls)
	out = b.resume(t, out.Snapshot)
	require.Equal(t, sandbox.StatusWaiting, out.Result.Status, out.Result.Error)
	require.Equal(t, sandbox.ReasonYield, out.Result.Reason)
	out = b.resume(t, out.Snapshot)
	requireCompleted(t, out, `"end"`)
	require.Len(t, out.Result.Output, 2)

	// Pending tools win over a yield as the reason.
	out = b.exec(t, `const p = tools.slow_add({}); await yield_control(); return await p`, sandbox.Limits{})
	require.Equal(t, sandbox.ReasonPendingTools, out.Result.Reason)
	out = b.resume(t, out.Snapshot)
	require.Equal(t, sandbox.ReasonPendingTools, out.Result.Reason)
	requireCompleted(t, b.resume(t, out.Snapshot, ok("call_1", 9)), `9`)
}

func TestMaxPendingToolCalls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := b.exec(t, `const ps = [];
for (let i = 0; i < 3; i++) {
  try { ps.push(tools.slow_add({i})); await null; } catch (e) { return e.message; }
}
try { await ps[2]; } catch (e) { return e.message; }
return "all pending"`, sandbox.Limits{MaxPendingToolCalls: 2})
	requireCompleted(t, out, `"too many pending tool calls (maxPendingToolCalls 2)"`)
}

func TestSnapshotRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := b.exec(t, `return await tools.slow_add({a: 1, b: 2})`, sandbox.Limits{})
	require.Equal(t, sandbox.StatusWaiting, out.Result.Status)
	snap := out.Snapshot

	flip := func(i int) []byte {
		c := append([]byte(nil), snap...)
		c[i] ^= 0x40
		return c
	}
	tests := []struct {
		name, code, contains string
		blob                 []byte
	}{
		{"empty", "internal_error", "truncated", nil},
		{"garbage", "internal_error", "not a toolq sandbox snapshot", bytes.Repeat([]byte("not a snapshot "), 20)},
		{"truncated", "internal_error", "signature", snap[:len(snap)-10]},
		{"header only", "internal_error", "truncated", snap[:100]},
		{"tampered payload", "internal_error", "signature", flip(len(snap) / 2)},
		{"tampered registers", "internal_error", "signature", flip(78)},
		{"tampered mac", "internal_error", "signature", flip(len(snap) - 1)},
		{"other wasm build", "internal_error", "different quickjs.wasm build", flip(10)},
		{"other version", "internal_error", "version", flip(4)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireFailed(t, b.resume(t, tt.blob, ok("call_1", 1)), tt.code, tt.contains)
		})
	}
	t.Run("oversized", func(t *testing.T) {
		t.Parallel()
		res, err := b.e.Resume(context.Background(), &sandbox.ResumeRequest{
			Snapshot: snap, Limits: sandbox.Limits{MaxSnapshotBytes: len(snap) - 1}, RunID: "run-1", Step: 1,
		})
		require.NoError(t, err)
		requireFailed(t, res, "snapshot_limit_exceeded", "maxSnapshotBytes")
	})
	t.Run("other key", func(t *testing.T) {
		t.Parallel()
		other := otherEngine(t)
		requireFailed(t, b.resume(t, snap[:0:0], ok("call_1", 1)), "internal_error", "")
		res, err := other.Resume(context.Background(), &sandbox.ResumeRequest{Snapshot: snap, Settlements: []sandbox.Settlement{ok("call_1", 1)}, RunID: "run-1", Step: 1})
		require.NoError(t, err)
		requireFailed(t, res, "internal_error", "key id \""+testEngine.SnapshotKeyID()+"\"")
	})
	t.Run("still valid after all that", func(t *testing.T) {
		t.Parallel()
		requireCompleted(t, b.resume(t, snap, ok("call_1", 3)), `3`)
	})
}

// TestForeignBuild resumes a snapshot in an engine running another build of
// quickjs.wasm (the same module plus a custom section).
func TestForeignBuild(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := b.exec(t, `return await tools.slow_add({})`, sandbox.Limits{})
	require.Equal(t, sandbox.StatusWaiting, out.Result.Status)

	wasm := append(embeddedWasm(t), 0, 9, 6, 't', 'o', 'o', 'l', 'q', '!', 1, 2)
	foreign, err := sandbox.NewEngine(context.Background(), &sandbox.EngineConfig{SnapshotKey: testKey, Wasm: wasm, PoolSize: 1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, foreign.Close(context.Background())) })
	require.NotEqual(t, testEngine.WasmSHA256(), foreign.WasmSHA256())

	res, err := foreign.Resume(context.Background(), &sandbox.ResumeRequest{Snapshot: out.Snapshot, Settlements: []sandbox.Settlement{ok("call_1", 1)}, RunID: "run-1", Step: 1})
	require.NoError(t, err)
	requireFailed(t, res, "internal_error", "different quickjs.wasm build")

	// The foreign engine works on its own snapshots.
	mine, err := foreign.Exec(context.Background(), &sandbox.ExecRequest{
		Input:   sandbox.Input{Code: `return await tools.slow_add({})`},
		Catalog: testCatalog(), Bridge: newBridge(),
	})
	require.NoError(t, err)
	res, err = foreign.Resume(context.Background(), &sandbox.ResumeRequest{Snapshot: mine.Snapshot, Settlements: []sandbox.Settlement{ok("call_1", 4)}, RunID: mine.Result.RunID, Step: mine.Step})
	require.NoError(t, err)
	requireCompleted(t, res, `4`)
}

var (
	otherOnce sync.Once
	other     *sandbox.Engine
)

func otherEngine(t *testing.T) *sandbox.Engine {
	t.Helper()
	otherOnce.Do(func() {
		var err error
		other, err = sandbox.NewEngine(context.Background(), &sandbox.EngineConfig{
			SnapshotKey: []byte("another key, also of thirty-two bytes or more"), PoolSize: 1,
		})
		require.NoError(t, err)
	})
	return other
}

func TestSnapshotLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code := `const big = []; for (let i = 0; i < 20000; i++) big.push({i, s: "item " + i + Math.random()});
const v = await tools.slow_add({}); return big.length + v`
	out := b.exec(t, code, sandbox.Limits{MaxSnapshotBytes: 16 << 10})
	requireFailed(t, out, "snapshot_limit_exceeded", "maxSnapshotBytes")
	require.Nil(t, out.Snapshot)

	out = b.exec(t, code, sandbox.Limits{})
	require.Equal(t, sandbox.StatusWaiting, out.Result.Status)
	require.Greater(t, len(out.Snapshot), 16<<10)
	requireCompleted(t, b.resume(t, out.Snapshot, ok("call_1", 1)), `20001`)
}

// TestConcurrentRuns drives many runs through the pool at once, suspending
// and resuming each.
func TestConcurrentRuns(t *testing.T) {
	t.Parallel()
	const workers, rounds = 6, 10
	var wg sync.WaitGroup
	errs := make(chan string, workers*rounds)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := &bundle{e: testEngine, bridge: newBridge()}
			for i := range rounds {
				ctx := context.Background()
				out, err := b.e.Exec(ctx, &sandbox.ExecRequest{
					Input:   sandbox.Input{Code: `const base = await tools.echo(` + itoa(w*100+i) + `); return base + await tools.slow_add({})`},
					Catalog: testCatalog(), Bridge: b.bridge,
				})
				if err != nil || out.Result.Status != sandbox.StatusWaiting {
					errs <- "exec: " + out.Result.Error
					continue
				}
				res, err := b.e.Resume(ctx, &sandbox.ResumeRequest{
					Snapshot:    out.Snapshot,
					Settlements: []sandbox.Settlement{ok("call_2", 1)}, Bridge: b.bridge,
					RunID: out.Result.RunID, Step: out.Step,
				})
				if err != nil || string(res.Result.Value) != itoa(w*100+i+1) {
					errs <- "resume: " + res.Result.Error + " " + string(res.Result.Value)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []string
	for e := range errs {
		all = append(all, e)
	}
	require.Empty(t, all)
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func embeddedWasm(t *testing.T) []byte {
	t.Helper()
	b, err := engine.EmbeddedWasm()
	require.NoError(t, err)
	return append([]byte(nil), b...)
}

func TestRunIDGenerated(t *testing.T) {
	t.Parallel()
	out, err := testEngine.Exec(context.Background(), &sandbox.ExecRequest{
		Input: sandbox.Input{Code: `return await tools.slow_add({})`}, Catalog: testCatalog(), Bridge: newBridge(),
	})
	require.NoError(t, err)
	require.Equal(t, sandbox.StatusWaiting, out.Result.Status)
	require.Regexp(t, `^run_[0-9a-f]{24}$`, out.Result.RunID)
	res, err := testEngine.Resume(context.Background(), &sandbox.ResumeRequest{
		Snapshot: out.Snapshot, Bridge: newBridge(), RunID: out.Result.RunID, Step: out.Step,
	})
	require.NoError(t, err)
	require.Equal(t, out.Result.RunID, res.Result.RunID)
}

// TestSnapshotBinding: a snapshot restores only as the run, session and
// step it was made for, so a signed snapshot of one run cannot be restored
// as another run or as an older step.
func TestSnapshotBinding(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	exec := func(runID, session string) *sandbox.Outcome {
		out, err := testEngine.Exec(ctx, &sandbox.ExecRequest{
			Input: sandbox.Input{Code: `await yield_control(); await yield_control(); return "end"`}, RunID: runID, Session: session,
		})
		require.NoError(t, err)
		require.Equal(t, sandbox.StatusWaiting, out.Result.Status, out.Result.Error)
		require.Equal(t, 1, out.Step)
		return out
	}
	resume := func(snap []byte, runID, session string, step int) *sandbox.Outcome {
		out, err := testEngine.Resume(ctx, &sandbox.ResumeRequest{Snapshot: snap, RunID: runID, Session: session, Step: step})
		require.NoError(t, err)
		return out
	}
	a := exec("run-a", "s1")
	exec("run-b", "s1")
	requireFailed(t, resume(a.Snapshot, "run-b", "s1", 1), "internal_error", `belongs to run "run-a" of session "s1", step 1`)
	requireFailed(t, resume(a.Snapshot, "run-a", "s2", 1), "internal_error", "snapshot refused")
	requireFailed(t, resume(a.Snapshot, "run-a", "s1", 2), "internal_error", "snapshot refused")

	next := resume(a.Snapshot, "run-a", "s1", 1)
	require.Equal(t, sandbox.StatusWaiting, next.Result.Status, next.Result.Error)
	require.Equal(t, 2, next.Step)
	// The older step is refused where the run now is.
	requireFailed(t, resume(a.Snapshot, "run-a", "s1", 2), "internal_error", "step 1")
	requireFailed(t, resume(next.Snapshot, "run-a", "s1", 1), "internal_error", "step 2")
	requireCompleted(t, resume(next.Snapshot, "run-a", "s1", 2), `"end"`)
}

// TestSnapshotKeyRotation: an engine signs with its current key and still
// restores snapshots of the older keys it is given; one without the key a
// snapshot was signed with says which key id it needs.
func TestSnapshotKeyRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	newKey := []byte("the new snapshot key, thirty-two bytes or more")
	rotated, err := sandbox.NewEngine(ctx, &sandbox.EngineConfig{
		SnapshotKey: newKey, SnapshotKeyID: "2026-12",
		SnapshotVerifyKeys: []sandbox.SnapshotKey{{Key: testKey}}, PoolSize: 1,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rotated.Close(ctx)) })
	require.Equal(t, "2026-12", rotated.SnapshotKeyID())
	require.Equal(t, sandbox.DefaultSnapshotKeyID(testKey), testEngine.SnapshotKeyID())

	out, err := testEngine.Exec(ctx, &sandbox.ExecRequest{Input: sandbox.Input{Code: `await yield_control(); await yield_control(); return 1`}, RunID: "r"})
	require.NoError(t, err)
	// The old key's snapshot restores on the rotated engine, which signs
	// the next one with its new key.
	next, err := rotated.Resume(ctx, &sandbox.ResumeRequest{Snapshot: out.Snapshot, RunID: "r", Step: 1})
	require.NoError(t, err)
	require.Equal(t, sandbox.StatusWaiting, next.Result.Status, next.Result.Error)
	// An engine with only the old key names the key it lacks.
	res, err := testEngine.Resume(ctx, &sandbox.ResumeRequest{Snapshot: next.Snapshot, RunID: "r", Step: 2})
	require.NoError(t, err)
	requireFailed(t, res, "internal_error", `key id "2026-12"`)
	res, err = rotated.Resume(ctx, &sandbox.ResumeRequest{Snapshot: next.Snapshot, RunID: "r", Step: 2})
	require.NoError(t, err)
	requireCompleted(t, res, `1`)

	_, err = sandbox.NewEngine(ctx, &sandbox.EngineConfig{SnapshotKey: newKey, SnapshotKeyID: "bad id"})
	require.Error(t, err)
}
