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
		{"huge waiting result", `await tools.callValue("toolq:core:noop", {x: "z".repeat(2e6)})`, contracts.CodeOutputLimitExceeded,
			map[string]any{"autoResume": true}},
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
