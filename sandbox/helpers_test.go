package sandbox_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/sandbox"
)

// memBridge is an in-memory bridge: tools in answer reply at once, every
// other tool is left pending for the test to settle.
type memBridge struct {
	sandbox.CatalogBridge
	mu     sync.Mutex
	answer map[string]func(input json.RawMessage) sandbox.CallOutcome
	calls  []sandbox.ToolCall
}

func (b *memBridge) Call(_ context.Context, call sandbox.ToolCall) (sandbox.CallOutcome, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, call)
	if f, ok := b.answer[call.Tool.ID]; ok {
		return f(call.Input), nil
	}
	return sandbox.CallOutcome{Pending: true}, nil
}

func tool(id, name, desc, input string) sandbox.Tool {
	src := id[:indexByte(id, ':')]
	return sandbox.Tool{
		CatalogEntry: sandbox.CatalogEntry{ID: id, Name: name, Description: desc, Source: src, Input: input},
		Parameters:   json.RawMessage(`{"type":"object"}`),
	}
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return len(s)
}

// testCatalog has immediate tools (echo, shipping_list, explode), pending
// ones (slow_add, exec, the MCP tool), two tools sharing a name, and one
// named like a helper.
func testCatalog() []sandbox.Tool {
	ship := tool("openclaw:shipping:shipping_list", "shipping_list", "List shipments.", "{}")
	ship.OutputSchema = json.RawMessage(`{"type":"array"}`)
	return []sandbox.Tool{
		tool("openclaw:core:echo", "echo", "Echo the input back.", "unknown"),
		ship,
		tool("openclaw:core:explode", "explode", "Always fails.", "{}"),
		tool("client:app:slow_add", "slow_add", "Add two numbers, slowly, on the client.", "{ a: number; b: number }"),
		tool("openclaw:core:exec", "exec", "Run a shell command.", "{ command: string }"),
		tool("openclaw:one:dup", "dup", "First dup.", "{}"),
		tool("openclaw:two:dup", "dup", "Second dup.", "{}"),
		tool("openclaw:core:search", "search", "A tool named like the helper.", "{}"),
		{
			CatalogEntry: sandbox.CatalogEntry{
				ID: "mcp:github:create_issue", Name: "create_issue",
				Description: "Create a GitHub issue.", Source: "mcp", SourceName: "github",
				Input: "{ owner: string; repo: string; title: string }",
			},
			Parameters: json.RawMessage(`{"type":"object"}`),
		},
	}
}

func newBridge() *memBridge {
	return &memBridge{answer: map[string]func(json.RawMessage) sandbox.CallOutcome{
		"openclaw:core:echo": func(in json.RawMessage) sandbox.CallOutcome {
			return sandbox.CallOutcome{Value: in}
		},
		"openclaw:shipping:shipping_list": func(json.RawMessage) sandbox.CallOutcome {
			return sandbox.CallOutcome{Value: json.RawMessage(
				`[{"id":"s1","paid":false,"tons":12},{"id":"s2","paid":true,"tons":30},{"id":"s3","paid":false,"tons":4}]`)}
		},
		"mcp:github:create_issue": func(json.RawMessage) sandbox.CallOutcome {
			return sandbox.CallOutcome{Value: json.RawMessage(`{"number":7}`)}
		},
		"openclaw:core:explode": func(json.RawMessage) sandbox.CallOutcome {
			return sandbox.CallOutcome{Error: "tool exploded"}
		},
	}}
}

type bundle struct {
	e      *sandbox.Engine
	bridge *memBridge
	// steps remembers the step each snapshot of run-1 is bound to.
	steps sync.Map
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{e: testEngine, bridge: newBridge()}
}

func (b *bundle) exec(t *testing.T, code string, limits sandbox.Limits) *sandbox.Outcome {
	t.Helper()
	out, err := b.e.Exec(context.Background(), &sandbox.ExecRequest{
		Input: sandbox.Input{Code: code}, Catalog: testCatalog(), Bridge: b.bridge, Limits: limits, RunID: "run-1",
	})
	require.NoError(t, err)
	b.steps.Store(string(out.Snapshot), out.Step)
	return out
}

func (b *bundle) resume(t *testing.T, snap []byte, s ...sandbox.Settlement) *sandbox.Outcome {
	t.Helper()
	step := 1
	if v, ok := b.steps.Load(string(snap)); ok {
		step = v.(int)
	}
	out, err := b.e.Resume(context.Background(), &sandbox.ResumeRequest{
		Snapshot: snap, Settlements: s, Bridge: b.bridge, RunID: "run-1", Step: step,
	})
	require.NoError(t, err)
	b.steps.Store(string(out.Snapshot), out.Step)
	return out
}

func requireCompleted(t *testing.T, out *sandbox.Outcome, wantJSON string) {
	t.Helper()
	require.Equal(t, sandbox.StatusCompleted, out.Result.Status, "error: %s (%s)", out.Result.Error, out.Result.Code)
	require.JSONEq(t, wantJSON, string(out.Result.Value))
	require.Nil(t, out.Snapshot)
}

func requireFailed(t *testing.T, out *sandbox.Outcome, code string, contains string) {
	t.Helper()
	require.Equal(t, sandbox.StatusFailed, out.Result.Status, "value: %s", out.Result.Value)
	require.Equal(t, code, string(out.Result.Code), "error: %s", out.Result.Error)
	require.Contains(t, out.Result.Error, contains)
}

func ok(callID string, v any) sandbox.Settlement {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return sandbox.Settlement{CallID: callID, Value: b}
}

func bad(callID, msg string) sandbox.Settlement {
	return sandbox.Settlement{CallID: callID, Error: msg}
}
