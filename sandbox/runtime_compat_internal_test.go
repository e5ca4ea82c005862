package sandbox

import (
	"context"
	_ "embed"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runtime1 is the guest runtime as it was before $api honoured its
// arguments and MCP namespaces had resources and prompts.
//
//go:embed testdata/prelude-1.js
var runtime1 string

// TestSnapshotOfOlderRuntime: a snapshot made under an older guest runtime
// (prelude.js) is refused by an engine running the current one, as a
// foreign build (internal_error, which code mode answers by replaying a
// restartSafe run), and never restored into a VM whose runtime functions
// lie elsewhere; each engine still resumes its own snapshots.
func TestSnapshotOfOlderRuntime(t *testing.T) {
	t.Parallel()
	key := []byte("0123456789abcdef0123456789abcdef")
	open := func(guest string) *Engine {
		e, err := NewEngine(context.Background(), &EngineConfig{SnapshotKey: key, PoolSize: 1, runtime: guest})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, e.Close(context.Background())) })
		return e
	}
	old, cur := open(runtime1), open("")
	require.NotEqual(t, runtime1, prelude, "testdata/prelude-1.js is the current runtime: the test proves nothing")
	require.Equal(t, old.WasmSHA256(), cur.WasmSHA256())
	require.NotEqual(t, old.rt.ImageSHA256, cur.rt.ImageSHA256, "the image digest must change with the runtime")

	cat := []Tool{{CatalogEntry: CatalogEntry{ID: "toolq:core:slow", Name: "slow", Source: SourceToolq, Description: "Slow."}, Parameters: json.RawMessage(`{}`)}}
	exec := func(e *Engine) *Outcome {
		out, err := e.Exec(context.Background(), &ExecRequest{
			Input: Input{Code: `return 1 + await tools.slow({})`}, Catalog: cat, Bridge: pendingBridge{}, RunID: "run-1", Session: "s",
		})
		require.NoError(t, err)
		require.Equal(t, StatusWaiting, out.Result.Status, out.Result.Error)
		return out
	}
	resume := func(e *Engine, out *Outcome) Result {
		res, err := e.Resume(context.Background(), &ResumeRequest{
			Snapshot: out.Snapshot, Settlements: []Settlement{{CallID: "call_1", Value: json.RawMessage(`41`)}},
			Bridge: pendingBridge{}, RunID: "run-1", Session: "s", Step: out.Step,
		})
		require.NoError(t, err)
		return res.Result
	}
	res := resume(cur, exec(old))
	require.Equal(t, StatusFailed, res.Status)
	require.Equal(t, "internal_error", string(res.Code))
	require.True(t, strings.HasPrefix(res.Error, "code mode snapshot refused"), res.Error)
	require.Contains(t, res.Error, "runtime image")

	res = resume(old, exec(cur))
	require.Equal(t, StatusFailed, res.Status, "and the other way round")

	for _, e := range []*Engine{old, cur} {
		res = resume(e, exec(e))
		require.Equal(t, StatusCompleted, res.Status, res.Error)
		require.JSONEq(t, `42`, string(res.Value))
	}
}
