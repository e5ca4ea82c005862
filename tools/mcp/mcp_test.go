package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/mcp"
	"github.com/toolq/toolq/tools/mcp/internal/testserver"
)

func ctxFor(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startHTTP serves the test tools over streamable HTTP at addr ("" for any
// free port) and returns the server.
func startHTTP(t *testing.T, addr string) *httptest.Server {
	t.Helper()
	srv := testserver.New("http")
	ts := httptest.NewUnstartedServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	if addr != "" {
		l, err := net.Listen("tcp", addr)
		require.NoError(t, err)
		ts.Listener = l
	}
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

func open(t *testing.T, cfg *mcp.Config) *mcp.Servers {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err := mcp.New(ctxFor(t), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func byName(t *testing.T, s *mcp.Servers) map[string]mcp.Tool {
	t.Helper()
	out := map[string]mcp.Tool{}
	for _, tool := range s.Tools() {
		out[tool.Name] = tool
	}
	return out
}

func call(t *testing.T, tool mcp.Tool, input string) (map[string]any, error) {
	t.Helper()
	res, err := tool.Handle(ctxFor(t), &contracts.Job{ID: "j1", Tool: tool.Name, Session: "s", Input: json.RawMessage(input)})
	if err != nil {
		return nil, err
	}
	var out map[string]any
	require.NoError(t, json.Unmarshal(res, &out), string(res))
	return out, nil
}

// requireMatches checks a result of tool against its catalog output schema
// the way a code-mode worker does.
func requireMatches(t *testing.T, tool mcp.Tool, input string) {
	t.Helper()
	res, err := tool.Handle(ctxFor(t), &contracts.Job{ID: "j1", Tool: tool.Name, Session: "s", Input: json.RawMessage(input)})
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(tool.Catalog.OutputSchema))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("output.json", doc))
	sch, err := c.Compile("output.json")
	require.NoError(t, err)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(res))
	require.NoError(t, err)
	require.NoError(t, sch.Validate(inst), string(res))
	// And a result that does not match is caught.
	bad, err := jsonschema.UnmarshalJSON(strings.NewReader(`{"content":[],"structuredContent":{"sum":"x","size":-1}}`))
	require.NoError(t, err)
	require.Error(t, sch.Validate(bad))
}

func codeOf(t *testing.T, err error) *contracts.Error {
	t.Helper()
	var ce *contracts.Error
	require.ErrorAs(t, err, &ce)
	return ce
}

// transports runs f against the same tools over streamable HTTP and stdio.
func transports(t *testing.T, f func(t *testing.T, server string, s *mcp.Servers)) {
	t.Helper()
	t.Run("http", func(t *testing.T) {
		t.Parallel()
		ts := startHTTP(t, "")
		f(t, "web", open(t, &mcp.Config{Servers: map[string]mcp.ServerConfig{"web": {URL: ts.URL}}}))
	})
	t.Run("stdio", func(t *testing.T) {
		t.Parallel()
		f(t, "local-1", open(t, &mcp.Config{Servers: map[string]mcp.ServerConfig{"local-1": {Command: stdioServer}}}))
	})
}

func TestListTools(t *testing.T) {
	t.Parallel()
	transports(t, func(t *testing.T, server string, s *mcp.Servers) {
		t.Helper()
		tools := byName(t, s)
		p := "mcp." + server + "."
		for _, n := range []string{"add", "broken", "echo", "fail", "pid"} {
			require.Contains(t, tools, p+n)
		}
		require.NotContains(t, tools, p+"outside", "a schema that points outside itself is refused")

		add := tools[p+"add"]
		require.Equal(t, server, add.Server())
		c := add.Catalog
		require.NoError(t, c.Validate())
		require.Equal(t, "mcp:"+server+":add", c.ID)
		require.Equal(t, contracts.SourceMCP, c.Source)
		require.Equal(t, "add", c.Name)
		require.Equal(t, "Add numbers", c.Label)
		require.Equal(t, "Add two numbers.", c.Description)
		require.True(t, c.SideEffects)
		var in map[string]any
		require.NoError(t, json.Unmarshal(c.InputSchema, &in))
		require.Equal(t, "object", in["type"])
		require.Contains(t, in["properties"], "a")
		// The output schema is the McpToolResult, the tool's own schema as
		// its structuredContent.
		var out struct {
			Properties struct {
				StructuredContent struct {
					Properties map[string]any `json:"properties"`
				} `json:"structuredContent"`
				IsError map[string]any `json:"isError"`
			} `json:"properties"`
		}
		require.NoError(t, json.Unmarshal(c.OutputSchema, &out), string(c.OutputSchema))
		require.Contains(t, out.Properties.StructuredContent.Properties, "sum")
		require.Equal(t, "boolean", out.Properties.IsError["type"])

		echo := tools[p+"echo"].Catalog
		require.Empty(t, echo.OutputSchema)
		require.Equal(t, "Echo text back.\nRepeats it `times` times.", echo.Description)

		// A name that is no id token is made one, with a hash of the
		// original so that two names never collide.
		var weird mcp.Tool
		for name, tool := range tools {
			if strings.HasPrefix(name, p+"weird_name_v2-") {
				weird = tool
			}
		}
		require.NotEmpty(t, weird.Name, "tools: %v", tools)
		require.True(t, contracts.ValidTool(weird.Name))
		require.NoError(t, weird.Catalog.Validate())
		res, err := call(t, weird, `{}`)
		require.NoError(t, err)
		require.Equal(t, "weird", res["content"].([]any)[0].(map[string]any)["text"])
	})
}

func TestCall(t *testing.T) {
	t.Parallel()
	transports(t, func(t *testing.T, server string, s *mcp.Servers) {
		t.Helper()
		tools := byName(t, s)
		p := "mcp." + server + "."

		res, err := call(t, tools[p+"echo"], `{"text":"hi","times":2}`)
		require.NoError(t, err)
		require.Equal(t, map[string]any{"content": []any{map[string]any{"type": "text", "text": "hihi"}}}, res)

		res, err = call(t, tools[p+"add"], `{"a":2,"b":3.5}`)
		require.NoError(t, err)
		require.Equal(t, map[string]any{"sum": 5.5}, res["structuredContent"])
		require.NotContains(t, res, "isError")
		require.Len(t, res["content"], 1)

		res, err = call(t, tools[p+"fail"], `{"reason":"why"}`)
		require.NoError(t, err, "a tool error is a result, not a failed job")
		require.Equal(t, true, res["isError"])
		require.Contains(t, res["content"].([]any)[0].(map[string]any)["text"], "boom: why")

		// Results match the declared output schema (definitions included).
		res, err = call(t, tools[p+"measure"], `{}`)
		require.NoError(t, err)
		require.Equal(t, map[string]any{"size": 3.0}, res["structuredContent"])
		requireMatches(t, tools[p+"add"], `{"a":1,"b":2}`)
		requireMatches(t, tools[p+"measure"], `{}`)
		require.Empty(t, tools[p+"leaky"].Catalog.OutputSchema, "an output schema pointing outside is dropped, the tool stays")

		// An empty input is an empty object.
		res, err = call(t, tools[p+"pid"], ``)
		require.NoError(t, err)
		require.NotEmpty(t, res["content"])
	})
}

func TestCallRefused(t *testing.T) {
	t.Parallel()
	transports(t, func(t *testing.T, server string, s *mcp.Servers) {
		t.Helper()
		tools := byName(t, s)
		p := "mcp." + server + "."
		for _, c := range []struct{ tool, input, want string }{
			{"echo", `{"text":5}`, "input does not match its schema"},
			{"echo", `{"times":2}`, "input does not match its schema"},
			{"echo", `[1,2]`, "input must be a JSON object"},
			{"echo", `"text"`, "input must be a JSON object"},
			{"add", `{"a":"x","b":1}`, "input does not match its schema: at '/a': got string, want number"},
			{"add", `{"a":1}`, "input does not match its schema: at '': missing property 'b'"},
		} {
			_, err := call(t, tools[p+c.tool], c.input)
			ce := codeOf(t, err)
			require.Equal(t, contracts.CodeInvalidInput, ce.Code, c.input)
			require.False(t, ce.Retryable)
			require.Contains(t, ce.Message, c.want)
		}
		// A protocol error (not a tool error) is the provider's, permanent.
		_, err := call(t, tools[p+"broken"], `{}`)
		ce := codeOf(t, err)
		require.Equal(t, contracts.CodeProviderError, ce.Code)
		require.False(t, ce.Retryable)
		require.Contains(t, ce.Message, "broken on purpose")
	})
}

func TestHTTPServerGone(t *testing.T) {
	t.Parallel()
	ts := startHTTP(t, "127.0.0.1:0")
	addr := ts.Listener.Addr().String()
	s := open(t, &mcp.Config{Servers: map[string]mcp.ServerConfig{"web": {URL: ts.URL, Headers: map[string]string{"X-Test": "1"}}}})
	echo := byName(t, s)["mcp.web.echo"]
	_, err := call(t, echo, `{"text":"a"}`)
	require.NoError(t, err)

	ts.Close()
	_, err = call(t, echo, `{"text":"a"}`)
	ce := codeOf(t, err)
	require.Equal(t, contracts.CodeProviderUnavailable, ce.Code, ce.Message)
	require.True(t, ce.Retryable)
	require.ErrorIs(t, err, contracts.ErrProviderUnavailable)

	// While it is down, every call fails the same way.
	_, err = call(t, echo, `{"text":"a"}`)
	require.True(t, codeOf(t, err).Retryable)

	// Back on the same address (a new process, so a new MCP session): the
	// next call connects again.
	startHTTP(t, addr)
	res, err := call(t, echo, `{"text":"back"}`)
	require.NoError(t, err)
	require.Equal(t, "back", res["content"].([]any)[0].(map[string]any)["text"])
}

func TestStdioServerGone(t *testing.T) {
	t.Parallel()
	s := open(t, &mcp.Config{Servers: map[string]mcp.ServerConfig{"local": {Command: stdioServer}}})
	tools := byName(t, s)
	pid := func() string {
		res, err := call(t, tools["mcp.local.pid"], `{}`)
		require.NoError(t, err)
		return res["content"].([]any)[0].(map[string]any)["text"].(string)
	}
	first := pid()
	require.Equal(t, first, pid(), "one process serves the session")

	_, err := call(t, tools["mcp.local.exit"], `{}`)
	ce := codeOf(t, err)
	require.Equal(t, contracts.CodeProviderUnavailable, ce.Code, ce.Message)
	require.True(t, ce.Retryable)

	second := pid()
	require.NotEqual(t, first, second, "the next call starts the server again")

	// Killed between calls: the session's end is noticed either before the
	// next call (which then connects again) or by it (which then fails,
	// retryable); at the latest the call after that runs on a new process.
	n, err := strconv.Atoi(second)
	require.NoError(t, err)
	proc, err := os.FindProcess(n)
	require.NoError(t, err)
	require.NoError(t, proc.Kill())
	res, err := call(t, tools["mcp.local.pid"], `{}`)
	if err != nil {
		require.True(t, codeOf(t, err).Retryable, err.Error())
		res, err = call(t, tools["mcp.local.pid"], `{}`)
		require.NoError(t, err)
	}
	third := res["content"].([]any)[0].(map[string]any)["text"].(string)
	require.NotEqual(t, second, third)
}

func TestCallDeadline(t *testing.T) {
	t.Parallel()
	s := open(t, &mcp.Config{Servers: map[string]mcp.ServerConfig{"local": {Command: stdioServer}}})
	tools := byName(t, s)
	pid, err := call(t, tools["mcp.local.pid"], `{}`)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = tools["mcp.local.echo"].Handle(ctx, &contracts.Job{ID: "j", Tool: "mcp.local.echo", Session: "s", Input: json.RawMessage(`{"text":"x"}`)})
	require.Equal(t, contracts.CodeCancelled, codeOf(t, err).Code)

	// A call that outlives its job's deadline times out (retryable) and
	// leaves the session to the other calls.
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = tools["mcp.local.block"].Handle(ctx, &contracts.Job{ID: "j", Tool: "mcp.local.block", Session: "s", Input: json.RawMessage(`{}`)})
	ce := codeOf(t, err)
	require.Equal(t, contracts.CodeTimeout, ce.Code)
	require.True(t, ce.Retryable)
	again, err := call(t, tools["mcp.local.pid"], `{}`)
	require.NoError(t, err)
	require.Equal(t, pid, again, "the same server process")
}

// TestStdioEnvironment is not parallel: it sets a variable of this process.
func TestStdioEnvironment(t *testing.T) {
	t.Setenv("TOOLQ_MCP_TEST_SECRET", "worker-only")
	s := open(t, &mcp.Config{Servers: map[string]mcp.ServerConfig{"local": {
		Command: stdioServer, Env: map[string]string{"GREETING": "hello"},
	}}})
	getenv := byName(t, s)["mcp.local.getenv"]
	text := func(name string) string {
		res, err := call(t, getenv, `{"name":"`+name+`"}`)
		require.NoError(t, err)
		return res["content"].([]any)[0].(map[string]any)["text"].(string)
	}
	require.Equal(t, "hello", text("GREETING"))
	require.Equal(t, "(unset)", text("TOOLQ_MCP_TEST_SECRET"), "the worker's environment stays in the worker")
}

func TestNewFails(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	for name, cfg := range map[string]*mcp.Config{
		"nothing listens": {Servers: map[string]mcp.ServerConfig{"web": {URL: "http://" + addr + "/mcp"}}, ConnectTimeout: 5 * time.Second},
		"no such command": {Servers: map[string]mcp.ServerConfig{"local": {Command: stdioServer + "-missing"}}},
		"bad name":        {Servers: map[string]mcp.ServerConfig{"a.b": {Command: stdioServer}}},
	} {
		cfg.Logger = slog.New(slog.DiscardHandler)
		s, err := mcp.New(ctxFor(t), cfg)
		require.Error(t, err, name)
		require.Nil(t, s, name)
	}
	// A failure after a first server connected closes that one too (goleak
	// in TestMain checks it).
	_, err = mcp.New(ctxFor(t), &mcp.Config{Servers: map[string]mcp.ServerConfig{
		"a": {Command: stdioServer}, "b": {URL: "http://" + addr + "/mcp"},
	}, Logger: slog.New(slog.DiscardHandler)})
	require.ErrorContains(t, err, "mcp server b")
}

func TestNamespace(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"github": "github", "chrome-devtools": "chromeDevtools", "my_srv": "mySrv", "Docs": "docs", "1st": "_1st", "--": "",
	} {
		require.Equal(t, want, mcp.Namespace(in), in)
	}
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	cfg, err := mcp.ParseConfig([]byte(`{"servers":{"gh":{"url":"https://example.com/mcp","headers":{"Authorization":"Bearer x"}},"fs":{"command":"mcp-fs","args":["--root","/srv/docs"],"env":{"A":"b"}}}}`))
	require.NoError(t, err)
	require.Equal(t, "https://example.com/mcp", cfg.Servers["gh"].URL)
	require.Equal(t, []string{"--root", "/srv/docs"}, cfg.Servers["fs"].Args)

	cfg, err = mcp.ParseConfig([]byte(`{"mcpServers":{"fs":{"command":"mcp-fs"}}}`))
	require.NoError(t, err)
	require.Equal(t, "mcp-fs", cfg.Servers["fs"].Command)

	for _, bad := range []string{
		`{"servers":{"a.b":{"command":"x"}}}`,
		`{"servers":{"":{"command":"x"}}}`,
		`{"servers":{"` + strings.Repeat("a", mcp.MaxServerName+1) + `":{"command":"x"}}}`,
		`{"servers":{"a":{}}}`,
		`{"servers":{"--":{"command":"x"}}}`,
		`{"servers":{"my-srv":{"command":"x"},"my_srv":{"command":"y"}}}`,
		`{"servers":{"a":{"command":"x","url":"http://h/"}}}`,
		`{"servers":{"a":{"url":"file:///etc/passwd"}}}`,
		`{"servers":{"a":{"url":"http:///nohost"}}}`,
		`{"servers":{"a":{"url":"http://h/","env":{"A":"b"}}}}`,
		`{"servers":{"a":{"command":"x","headers":{"A":"b"}}}}`,
		`{"servers":{"a":{"url":"http://h/","headers":{"mcp-session-id":"b"}}}}`,
		`{"servers":{"a":{"url":"http://h/","headers":{"Bad Name":"b"}}}}`,
		`{"servers":{"a":{"url":"http://h/","headers":{"X-A":"b\r\nX-B: c"}}}}`,
		`{"servers":{"a":{"command":"x","typo":1}}}`,
		`{"servers":{"a":{"command":"x"}},"mcpServers":{"b":{"command":"x"}}}`,
		`[]`,
	} {
		_, err := mcp.ParseConfig([]byte(bad))
		require.ErrorIs(t, err, contracts.ErrInvalidInput, bad)
	}
}
