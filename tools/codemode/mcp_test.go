package codemode_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/tools/mcp"
	"github.com/toolq/toolq/worker"
)

type issueIn struct {
	Owner string `json:"owner"`
	Repo  string `json:"repo"`
	Title string `json:"title"`
	Body  string `json:"body,omitempty"`
}

type issueOut struct {
	Number int    `json:"number"`
	URL    string `json:"url"`
}

// startGitHub serves a small "github" MCP server over streamable HTTP:
// create_issue (with an output schema), search_code (without) and
// lock_issue (a tool error).
func startGitHub(t *testing.T) string {
	t.Helper()
	s := sdk.NewServer(&sdk.Implementation{Name: "github", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "create_issue", Description: "Create a GitHub issue."},
		func(_ context.Context, _ *sdk.CallToolRequest, in issueIn) (*sdk.CallToolResult, issueOut, error) {
			return nil, issueOut{Number: 7, URL: "https://github.example/" + in.Owner + "/" + in.Repo + "/issues/7"}, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "search_code", Description: "Search code."},
		func(_ context.Context, _ *sdk.CallToolRequest, in struct {
			Query string `json:"query"`
		},
		) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "found " + in.Query}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "lock_issue", Description: "Lock an issue."},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return nil, nil, errors.New("locking is not allowed")
		})
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(ts.Close)
	return ts.URL
}

// registerMCP registers the tools of the configured servers on w, the way
// the toolq binary does.
func registerMCP(t *testing.T, cfg *mcp.Config) func(w *worker.Worker) {
	t.Helper()
	cfg.Logger = quiet
	return func(w *worker.Worker) {
		// The servers are the worker's extension: its Stop closes them.
		_, err := mcp.Register(testutil.Context(t, 20*time.Second), w, cfg)
		require.NoError(t, err)
	}
}

func TestMCPToolsInCodeMode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url := startGitHub(t)
	// The same server twice: under a plain name and under one that the
	// guest sees in camel case.
	w := b.startWorker(t, "A", nil, registerMCP(t, &mcp.Config{Servers: map[string]mcp.ServerConfig{
		"github": {URL: url}, "code-search": {URL: url},
	}}))
	require.Contains(t, w.Tools(), "mcp.github.create_issue")
	require.Contains(t, w.Tools(), "mcp.code-search.search_code")

	// Declarations come without any bridge or tool call.
	job := b.exec(t, `
		const files = await API.list("mcp");
		const decl = await API.read("mcp/github.d.ts");
		const api = await MCP.github.$api();
		return {files, decl, same: api === decl, fns: Object.keys(MCP.github).sort(), namespaces: Object.keys(MCP).sort()};`, nil, nil)
	ev := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	r := result(t, ev.Data.Result)
	require.Zero(t, r.Telemetry.BridgeCalls.Search+r.Telemetry.BridgeCalls.Describe+r.Telemetry.BridgeCalls.Call)
	require.Zero(t, r.Telemetry.NestedCalls)
	var decl struct {
		Files []string `json:"files"`
		Decl  string   `json:"decl"`
		Same  bool     `json:"same"`
		Fns   []string `json:"fns"`
		NS    []string `json:"namespaces"`
	}
	require.NoError(t, json.Unmarshal(r.Value, &decl))
	require.ElementsMatch(t, []string{"mcp/github.d.ts", "mcp/codeSearch.d.ts"}, decl.Files)
	require.Equal(t, []string{mcp.Namespace("code-search"), "github"}, decl.NS)
	require.True(t, decl.Same, "$api() returns the declaration")
	require.Equal(t, []string{"$api", "createIssue", "lockIssue", "searchCode"}, decl.Fns)
	require.True(t, strings.HasPrefix(decl.Decl, "declare namespace MCP.github {"), decl.Decl)
	for _, want := range []string{
		"Create a GitHub issue.",
		"@id mcp:github:create_issue",
		"function createIssue(input: { body?: string; owner: string; repo: string; title: string }): Promise<McpToolResult & { structuredContent?: { number: number; url: string } }>;",
		"function searchCode(input: { query: string }): Promise<McpToolResult>;",
	} {
		require.Contains(t, decl.Decl, want)
	}

	// Namespace calls are nested jobs; each returns the McpToolResult.
	job = b.exec(t, `
		const issue = await MCP.github.createIssue({owner: "toolq", repo: "toolq", title: "Look at the logs"});
		const [hits, locked, other] = await Promise.all([
			MCP.github.searchCode({query: "wazero"}), MCP.github.lockIssue({}), MCP.codeSearch.searchCode({query: "quickjs"}),
		]);
		let direct = "";
		try { await tools.call("mcp:github:create_issue", {owner: "o", repo: "r", title: "t"}); } catch (e) { direct = e.message; }
		return {
			issue, hits, locked, other, direct,
			ids: ALL_TOOLS.map((t) => t.id),
			toolNames: Object.keys(tools),
			found: (await tools.search("issue")).map((t) => t.id),
		};`, map[string]any{"autoResume": true}, nil)
	first := b.await(t, job, true)
	require.Equal(t, contracts.StatusWaiting, first.Data.Status, string(first.Data.Result))
	ev = b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	r = result(t, ev.Data.Result)
	require.Equal(t, 4, r.Telemetry.NestedCalls)
	var v struct {
		Issue     map[string]any `json:"issue"`
		Hits      map[string]any `json:"hits"`
		Locked    map[string]any `json:"locked"`
		Other     map[string]any `json:"other"`
		Direct    string         `json:"direct"`
		IDs       []string       `json:"ids"`
		ToolNames []string       `json:"toolNames"`
		Found     []string       `json:"found"`
	}
	require.NoError(t, json.Unmarshal(r.Value, &v))
	require.Equal(t, map[string]any{"number": 7.0, "url": "https://github.example/toolq/toolq/issues/7"}, v.Issue["structuredContent"])
	require.NotEmpty(t, v.Issue["content"])
	require.NotContains(t, v.Issue, "isError")
	require.Equal(t, []any{map[string]any{"type": "text", "text": "found wazero"}}, v.Hits["content"])
	require.Equal(t, []any{map[string]any{"type": "text", "text": "found quickjs"}}, v.Other["content"])
	require.Equal(t, true, v.Locked["isError"])
	require.Contains(t, v.Locked["content"].([]any)[0].(map[string]any)["text"], "locking is not allowed")
	require.Contains(t, v.Direct, "call it as MCP.github.createIssue(input)")

	// MCP tools are reachable only through their namespace.
	require.Contains(t, v.IDs, "toolq:core:noop")
	for _, id := range append(v.IDs, v.Found...) {
		require.False(t, strings.HasPrefix(id, "mcp:"), id)
	}
	for _, n := range v.ToolNames {
		require.NotContains(t, []string{"create_issue", "createIssue", "search_code", "searchCode", "lock_issue", "lockIssue"}, n)
	}
	require.Contains(t, v.ToolNames, "noop")

	// The MCP calls ran as jobs under the run.
	var nested []string
	require.NoError(t, b.prod.ReadEvents(testutil.Context(t, 10*time.Second), job.Session, nil, func(ev *contracts.Event) error {
		if ev.Data.Parent != nil && ev.Data.Parent.RunID == job.ID && ev.Data.Status == contracts.StatusCompleted {
			nested = append(nested, ev.Data.Tool)
		}
		return nil
	}))
	require.ElementsMatch(t, []string{"mcp.github.create_issue", "mcp.github.search_code", "mcp.github.lock_issue", "mcp.code-search.search_code"}, nested)
}

// TestMCPStdioServerInCodeMode runs a stdio MCP server (the test server
// program of tools/mcp) under a worker and calls it from guest code.
func TestMCPStdioServerInCodeMode(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "testserver")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/toolq/toolq/tools/mcp/internal/testserver/stdio").CombinedOutput()
	require.NoError(t, err, string(out))

	b := setup(t)
	b.startWorker(t, "A", nil, registerMCP(t, &mcp.Config{Servers: map[string]mcp.ServerConfig{"local-tools": {Command: bin}}}))
	job := b.exec(t, `
		const [echo, sum, failed] = await Promise.all([
			MCP.localTools.echo({text: "ab", times: 2}),
			MCP.localTools.add({a: 2, b: 40}),
			MCP.localTools.fail({reason: "no"}),
		]);
		let bad = "";
		try { await MCP.localTools.add({a: "two", b: 1}); } catch (e) { bad = e.message; }
		return {echo: echo.content[0].text, sum: sum.structuredContent.sum, failed: failed.isError === true, bad};`,
		map[string]any{"autoResume": true}, nil)
	ev := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	require.JSONEq(t, `{"echo":"abab","sum":42,"failed":true,"bad":"invalid_input: mcp tool mcp.local-tools.add: input does not match its schema: at '/a': got string, want number"}`,
		string(result(t, ev.Data.Result).Value))

	// MCP tools count as side-effecting: a restartSafe run may not call them.
	job = b.exec(t, `try { await MCP.localTools.echo({text: "x"}); return "called"; } catch (e) { return e.message; }`,
		map[string]any{"restartSafe": true}, nil)
	ev = b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	require.Contains(t, string(result(t, ev.Data.Result).Value), "refused in a restartSafe run")
}

// startDocs serves a "docs" MCP server with no tools of its own but
// resources (memo://one; memo://broken, whose read fails on the server)
// and a prompt (brief {topic}), over streamable HTTP.
func startDocs(t *testing.T) string {
	t.Helper()
	s := sdk.NewServer(&sdk.Implementation{Name: "docs", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "search_docs", Description: "Search the docs."},
		func(_ context.Context, _ *sdk.CallToolRequest, in struct {
			Query string `json:"query"`
		},
		) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "found " + in.Query}}}, nil, nil
		})
	s.AddResource(&sdk.Resource{URI: "memo://one", Name: "one", MIMEType: "text/plain"},
		func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, MIMEType: "text/plain", Text: "first memo"}}}, nil
		})
	s.AddResource(&sdk.Resource{URI: "memo://broken", Name: "broken"},
		func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return nil, errors.New("the memo store is down")
		})
	s.AddPrompt(&sdk.Prompt{Name: "brief", Arguments: []*sdk.PromptArgument{{Name: "topic", Required: true}}},
		func(_ context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			return &sdk.GetPromptResult{Messages: []*sdk.PromptMessage{
				{Role: "user", Content: &sdk.TextContent{Text: "Brief me on " + req.Params.Arguments["topic"] + "."}},
			}}, nil
		})
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(ts.Close)
	return ts.URL
}

// mcpCapabilitiesProgram reads a resource and a prompt, then collects the
// failures: unknown resource and prompt, bad input, the server's error, a
// server no worker runs.
const mcpCapabilitiesProgram = `
	const r = await MCP.docs.resources.read({uri: "memo://one"});
	const p = await MCP.docs.prompts.get({name: "brief", arguments: {topic: "release"}});
	const errs = {};
	const tries = {
		unknownResource: () => MCP.docs.resources.read({uri: "memo://nope"}),
		unknownPrompt: () => MCP.docs.prompts.get({name: "nope"}),
		badInput: () => MCP.docs.resources.read({url: "memo://one"}),
		serverError: () => MCP.docs.resources.read({uri: "memo://broken"}),
		unknownServer: () => MCP.nope.resources.read({uri: "memo://one"}),
		byGuessedID: () => tools.call("mcp:nope:resources--read", {uri: "memo://one"}),
	};
	for (const k of Object.keys(tries)) {
		try { await tries[k](); errs[k] = "no error"; } catch (e) { errs[k] = {name: e.name, code: e.code === undefined ? "" : e.code, message: e.message}; }
	}
	const api = await MCP.docs.$api("resources.read", {schema: true});
	return {r, p, errs, api, namespaces: Object.keys(MCP), hidden: ALL_TOOLS.filter((t) => t.id.startsWith("mcp:")).length};`

type capabilityErr struct {
	Name    string `json:"name"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

type capabilitiesOut struct {
	R          contracts.MCPReadResourceResult `json:"r"`
	P          contracts.MCPGetPromptResult    `json:"p"`
	Errs       map[string]capabilityErr        `json:"errs"`
	API        string                          `json:"api"`
	Namespaces []string                        `json:"namespaces"`
	Hidden     int                             `json:"hidden"`
}

// checkCapabilities checks what mcpCapabilitiesProgram returned.
func checkCapabilities(t *testing.T, value json.RawMessage) {
	t.Helper()
	var v capabilitiesOut
	require.NoError(t, json.Unmarshal(value, &v), string(value))
	require.Len(t, v.R.Contents, 1)
	require.JSONEq(t, `{"uri":"memo://one","mimeType":"text/plain","text":"first memo"}`, string(v.R.Contents[0]))
	require.Len(t, v.P.Messages, 1)
	require.JSONEq(t, `{"role":"user","content":{"type":"text","text":"Brief me on release."}}`, string(v.P.Messages[0]))
	for k, want := range map[string]capabilityErr{
		"unknownResource": {"Error", "invalid_input", "memo://nope"},
		"unknownPrompt":   {"Error", "invalid_input", `unknown prompt "nope"`},
		"badInput":        {"Error", "invalid_input", "does not match its schema"},
		"serverError":     {"Error", "provider_error", "the memo store is down"},
		"unknownServer":   {"TypeError", "", "resources"},
		"byGuessedID":     {"Error", "", "not in this run's catalog"},
	} {
		got := v.Errs[k]
		require.Equal(t, want.Name, got.Name, "%s: %+v", k, got)
		require.Equal(t, want.Code, got.Code, "%s: %+v", k, got)
		require.Contains(t, got.Message, want.Message, k)
	}
	require.Contains(t, v.API, "namespace resources {")
	require.Contains(t, v.API, `@inputSchema {"type":"object","properties":{"uri":`)
	require.Contains(t, v.API, "function read(input: { uri: string }): Promise<{ contents: {")
	require.NotContains(t, v.API, "searchDocs")
	require.Equal(t, []string{"docs"}, v.Namespaces)
	require.Zero(t, v.Hidden, "MCP entries stay out of ALL_TOOLS")
}

// TestMCPResourcesAndPromptsInCodeMode: MCP.<server>.resources.read and
// .prompts.get run as nested jobs on a real worker against a real MCP
// server; failures reach the guest with their error codes; the reads are
// allowed in a restartSafe run.
func TestMCPResourcesAndPromptsInCodeMode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := b.startWorker(t, "A", nil, registerMCP(t, &mcp.Config{Servers: map[string]mcp.ServerConfig{"docs": {URL: startDocs(t)}}}))
	require.Contains(t, w.Tools(), "mcp.docs.resources.read")
	require.Contains(t, w.Tools(), "mcp.docs.prompts.get")

	job := b.exec(t, mcpCapabilitiesProgram, map[string]any{"autoResume": true}, nil)
	ev := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	checkCapabilities(t, result(t, ev.Data.Result).Value)

	// Each call was a job of its own under the run.
	var nested []string
	require.NoError(t, b.prod.ReadEvents(testutil.Context(t, 10*time.Second), job.Session, nil, func(ev *contracts.Event) error {
		if ev.Data.Parent != nil && ev.Data.Parent.RunID == job.ID && ev.Data.Status.Terminal() {
			nested = append(nested, ev.Data.Tool+" "+string(ev.Data.Status))
		}
		return nil
	}))
	require.ElementsMatch(t, []string{
		"mcp.docs.resources.read completed", "mcp.docs.prompts.get completed",
		"mcp.docs.resources.read failed", "mcp.docs.prompts.get failed",
		"mcp.docs.resources.read failed", "mcp.docs.resources.read failed",
	}, nested)

	job = b.exec(t, `return (await MCP.docs.resources.read({uri: "memo://one"})).contents[0].text;`, map[string]any{"restartSafe": true, "autoResume": true}, nil)
	ev = b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	require.JSONEq(t, `"first memo"`, string(result(t, ev.Data.Result).Value))
}

// TestMCPServersKeptToTenants: an MCP server configured for ACME only is
// in ACME's runs alone — GLOBEX's and the default tenant's runs have no
// such namespace and cannot call its entries by id — while a server for
// every tenant is in each; each tenant's nested MCP calls are jobs of its
// own subspace.
func TestMCPServersKeptToTenants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testutil.Context(t, 30*time.Second)
	js := testutil.JetStream(t, b.srv.Connect(t))
	for _, name := range []string{"ACME", "GLOBEX"} {
		require.NoError(t, bus.AddTenant(ctx, js, bus.Config{}, contracts.TenantRecord{Name: name}))
	}
	url := startDocs(t)
	b.startWorkerWith(t, &worker.Config{Name: "A", Tenants: true}, nil, registerMCP(t, &mcp.Config{Servers: map[string]mcp.ServerConfig{
		"docs": {URL: url, Tenants: []string{"ACME"}}, "pub": {URL: url},
	}}))
	code := `
		const out = {namespaces: Object.keys(MCP).sort()};
		out.pub = (await MCP.pub.resources.read({uri: "memo://one"})).contents[0].text;
		out.docs = MCP.docs ? (await MCP.docs.prompts.get({name: "brief", arguments: {topic: "x"}})).messages.length : "none";
		try { await tools.call("mcp:docs:resources--read", {uri: "memo://one"}); out.byID = "called"; } catch (e) { out.byID = e.message; }
		return out;`
	s := contracts.Subjects{}
	for _, c := range []struct {
		tenant, want, byID string
	}{
		{"ACME", `{"namespaces":["docs","pub"],"pub":"first memo","docs":1}`, "call it as MCP.docs.resources.read(input)"},
		{"GLOBEX", `{"namespaces":["pub"],"pub":"first memo","docs":"none"}`, "it is not in this run's catalog"},
	} {
		id := "run-" + c.tenant
		b.tenantJob(t, c.tenant, codeJob(id, contracts.ToolCodeModeExec, "s1", map[string]any{"code": code, "autoResume": true}))
		ev := b.tenantEvent(t, c.tenant, "s1", id, terminal)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%s: %v", c.tenant, ev.Data.Error)
		var v map[string]any
		require.NoError(t, json.Unmarshal(result(t, ev.Data.Result).Value, &v))
		require.Contains(t, v["byID"], c.byID, c.tenant)
		delete(v, "byID")
		require.JSONEq(t, c.want, string(mustJSON(t, v)), c.tenant)
	}
	// Each tenant's nested calls ran in its own subspace.
	st, err := js.Stream(ctx, s.EventsStream())
	require.NoError(t, err)
	for tenant, want := range map[string][]string{
		"ACME":   {contracts.NestedJobID("run-ACME", "call_1"), contracts.NestedJobID("run-ACME", "call_2")},
		"GLOBEX": {contracts.NestedJobID("run-GLOBEX", "call_1")},
	} {
		for _, id := range want {
			m, err := st.GetLastMsgForSubject(ctx, s.TenantEvent(tenant, "s1", id))
			require.NoError(t, err, "%s: %s", tenant, id)
			ev, err := contracts.DecodeEvent(m.Data)
			require.NoError(t, err)
			require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%s: %s", tenant, id)
			require.True(t, strings.HasPrefix(ev.Data.Tool, "mcp."), ev.Data.Tool)
		}
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(s.Event("s1", ">")))
	require.NoError(t, err)
	require.Empty(t, info.State.Subjects, "a tenant's MCP call wrote events of the default tenant")
	// The default tenant's runs see only the shared server too.
	job := b.exec(t, `return Object.keys(MCP).sort();`, nil, nil)
	ev := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	require.JSONEq(t, `["pub"]`, string(result(t, ev.Data.Result).Value))
}
