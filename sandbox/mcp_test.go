package sandbox_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/sandbox"
)

// mcpCatalog is a "docs" server with a tool, resources and prompts (and a
// tool named resources, which the capability shadows) and a "plain" server
// with a tool named prompts, which it keeps.
func mcpCatalog() []sandbox.Tool {
	mcpTool := func(id, name, desc, input, output string, params string) sandbox.Tool {
		t := sandbox.Tool{
			CatalogEntry: sandbox.CatalogEntry{ID: id, Name: name, Description: desc, Source: "mcp", Input: input, Output: output},
			Parameters:   json.RawMessage(params),
		}
		if output != "" {
			t.OutputSchema = json.RawMessage(`{"type":"object","properties":{"contents":{"type":"array"}}}`)
		}
		return t
	}
	return []sandbox.Tool{
		mcpTool("mcp:docs:create_issue", "create_issue", "Create an issue.", "{ title: string }", "", `{"type":"object","properties":{"title":{"type":"string"}}}`),
		mcpTool("mcp:docs:resources--read", "resources.read", "Read a resource.", "{ uri: string }", "{ contents: { uri: string }[] }", `{"type":"object","properties":{"uri":{"type":"string"}},"required":["uri"]}`),
		mcpTool("mcp:docs:prompts--get", "prompts.get", "Get a prompt.", "{ name: string }", "", `{"type":"object"}`),
		mcpTool("mcp:docs:resources", "resources", "A tool the capability shadows.", "{}", "", `{}`),
		mcpTool("mcp:plain:prompts", "prompts", "A tool named prompts.", "{}", "", `{}`),
	}
}

type answers map[string]sandbox.CallOutcome

func (a answers) Search(_ context.Context, c *sandbox.Catalog, q string, limit int) ([]sandbox.CatalogEntry, error) {
	return c.Search(q, limit), nil
}

func (a answers) Describe(_ context.Context, t sandbox.Tool) (sandbox.Tool, error) { return t, nil }

func (a answers) Call(_ context.Context, call sandbox.ToolCall) (sandbox.CallOutcome, error) {
	out, ok := a[call.Tool.ID]
	if !ok {
		return sandbox.CallOutcome{Value: json.RawMessage(`{"echo":` + string(call.Input) + `}`)}, nil
	}
	return out, nil
}

func execMCP(t *testing.T, code string, a answers) *sandbox.Outcome {
	t.Helper()
	out, err := testEngine.Exec(context.Background(), &sandbox.ExecRequest{
		Input: sandbox.Input{Code: code}, Catalog: mcpCatalog(), Bridge: a, RunID: "run-1",
	})
	require.NoError(t, err)
	return out
}

// TestMCPResourcesAndPrompts: MCP.<server>.resources.read and
// .prompts.get call their catalog entries with the guest's input; a
// failure that names an error code reaches the guest as e.code.
func TestMCPResourcesAndPrompts(t *testing.T) {
	t.Parallel()
	out := execMCP(t, `
		const r = await MCP.docs.resources.read({uri: "memo://one"}).catch((e) => e.code);
		const p = await MCP.docs.prompts.get({name: "brief", arguments: {topic: "release"}});
		let unknown = {};
		try { await MCP.docs.resources.read({uri: "memo://nope"}); } catch (e) { unknown = {message: e.message, code: e.code}; }
		let plainErr = {};
		try { await MCP.plain.prompts({}); } catch (e) { plainErr = {message: e.message, code: e.code === undefined ? "none" : e.code}; }
		const raw = await tools.call("mcp:docs:create_issue", {}).catch((e) => e.message);
		return {
			r, p, unknown, plainErr, raw,
			docs: Object.keys(MCP.docs).sort(), resources: Object.keys(MCP.docs.resources), prompts: Object.keys(MCP.docs.prompts),
			plain: Object.keys(MCP.plain).sort(), frozen: Object.isFrozen(MCP.docs.resources),
		};`,
		answers{
			"mcp:docs:resources--read": {Error: "invalid_input: mcp docs: call resources/read: Resource not found (memo://nope)"},
			"mcp:plain:prompts":        {Error: "a host error without a code"},
		})
	require.Equal(t, sandbox.StatusCompleted, out.Result.Status, out.Result.Error)
	var v struct {
		R         string            `json:"r"`
		Unknown   map[string]string `json:"unknown"`
		PlainErr  map[string]string `json:"plainErr"`
		P         map[string]any    `json:"p"`
		Raw       string            `json:"raw"`
		Docs      []string          `json:"docs"`
		Resources []string          `json:"resources"`
		Prompts   []string          `json:"prompts"`
		Plain     []string          `json:"plain"`
		Frozen    bool              `json:"frozen"`
	}
	require.NoError(t, json.Unmarshal(out.Result.Value, &v))
	require.Equal(t, "invalid_input", v.R)
	require.Equal(t, map[string]string{"message": "invalid_input: mcp docs: call resources/read: Resource not found (memo://nope)", "code": "invalid_input"}, v.Unknown)
	require.Equal(t, map[string]string{"message": "a host error without a code", "code": "none"}, v.PlainErr)
	require.Equal(t, map[string]any{"echo": map[string]any{"name": "brief", "arguments": map[string]any{"topic": "release"}}}, v.P)
	require.Contains(t, v.Raw, "is an MCP tool")
	require.Equal(t, []string{"$api", "createIssue", "prompts", "resources"}, v.Docs, "the capability shadows the tool named resources")
	require.Equal(t, []string{"read"}, v.Resources)
	require.Equal(t, []string{"get"}, v.Prompts)
	require.Equal(t, []string{"$api", "prompts"}, v.Plain, "a server without prompts keeps its tool named prompts")
	require.True(t, v.Frozen)
}

// TestMCPAPI: $api() is the namespace's declaration; $api(toolName) is one
// function's (named as the namespace, the server or the catalog names it);
// {schema: true} adds the JSON Schemas; an unknown tool rejects. None of it
// is a bridge call.
func TestMCPAPI(t *testing.T) {
	t.Parallel()
	out := execMCP(t, `
		const all = await MCP.docs.$api();
		const one = await MCP.docs.$api("createIssue");
		const byServerName = await MCP.docs.$api("create_issue");
		const byID = await MCP.docs.$api("mcp:docs:create_issue");
		const read = await MCP.docs.$api("resources.read", {schema: true});
		const schemas = await MCP.docs.$api(undefined, {schema: true});
		const noSchema = await MCP.docs.$api("createIssue", {schema: false});
		let unknown = "";
		try { await MCP.docs.$api("nope"); } catch (e) { unknown = e.message; }
		return {all, same: all === await API.read("mcp/docs.d.ts"), one, byServerName, byID, read, schemas, noSchema, unknown};`, answers{})
	require.Equal(t, sandbox.StatusCompleted, out.Result.Status, out.Result.Error)
	require.Zero(t, out.Result.Telemetry.BridgeCalls)
	var v map[string]any
	require.NoError(t, json.Unmarshal(out.Result.Value, &v))
	all, one, read, schemas := v["all"].(string), v["one"].(string), v["read"].(string), v["schemas"].(string)
	require.Equal(t, true, v["same"])
	for _, want := range []string{
		"function $api(toolName?: string, options?: { schema?: boolean }): Promise<string>;",
		"function createIssue(input: { title: string }): Promise<McpToolResult>;",
		"  namespace resources {\n    /**\n     * Read a resource.\n     * @id mcp:docs:resources--read\n     */\n    function read(input: { uri: string }): Promise<{ contents: { uri: string }[] }>;\n  }",
		"  namespace prompts {",
		"function get(input: { name: string }): Promise<McpToolResult>;",
	} {
		require.Contains(t, all, want)
	}
	require.NotContains(t, all, "@inputSchema")
	require.NotContains(t, all, "A tool the capability shadows.")

	require.Equal(t, "declare namespace MCP.docs {\n\n  /**\n   * Create an issue.\n   * @id mcp:docs:create_issue\n   */\n  function createIssue(input: { title: string }): Promise<McpToolResult>;\n}\n", one)
	require.Equal(t, one, v["byServerName"])
	require.Equal(t, one, v["byID"])
	require.Equal(t, one, v["noSchema"])

	require.Contains(t, read, `     * @inputSchema {"type":"object","properties":{"uri":{"type":"string"}},"required":["uri"]}`)
	require.Contains(t, read, `     * @outputSchema {"type":"object","properties":{"contents":{"type":"array"}}}`)
	require.NotContains(t, read, "createIssue")
	require.Contains(t, schemas, `   * @inputSchema {"type":"object","properties":{"title":{"type":"string"}}}`)
	require.Contains(t, schemas, "@outputSchema")
	require.Contains(t, schemas, "function $api(")
	require.Equal(t, `$api: MCP.docs has no tool "nope"`, v["unknown"])
}
