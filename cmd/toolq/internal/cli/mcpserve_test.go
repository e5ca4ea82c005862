package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/tooldefs"
	"github.com/toolq/toolq/tooldefs/tooldefstest"
)

// mcpBundle is an MCP client session connected to `toolq mcp serve`'s
// server, in front of a real worker with code mode.
type mcpBundle struct {
	cs      *sdk.ClientSession
	p       *producer.Producer // to follow the jobs the calls made
	session string             // the toolq session of the MCP session
	// progress receives the message of each progress notification.
	progress chan string
}

// mcpSetup starts the MCP server of a bus with code mode (--code-mode
// mode) and connects a go-sdk client over an in-memory transport, or over
// streamable HTTP on a loopback port.
func mcpSetup(t *testing.T, url, mode string, overHTTP bool, elicit ...func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error)) *mcpBundle {
	t.Helper()
	version := ""
	if len(elicit) > 0 {
		// Before protocol 2026-07-28 the server asks with an elicitation
		// request of its own; TestMCPServeApprovalInResult covers the
		// question riding in the call's result.
		version = "2025-11-25"
	}
	return mcpSetupVersion(t, url, mode, overHTTP, version, elicit...)
}

// mcpSetupVersion is mcpSetup with the protocol version the client asks
// for ("" for the go-sdk's latest).
func mcpSetupVersion(t *testing.T, url, mode string, overHTTP bool, version string, elicit ...func(context.Context, *sdk.ElicitRequest) (*sdk.ElicitResult, error)) *mcpBundle {
	t.Helper()
	ctx := testutil.Context(t, 60*time.Second)
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	log := slog.New(slog.DiscardHandler)
	g := &globals{prefix: contracts.DefaultPrefix, log: log, stdout: io.Discard, stderr: io.Discard, timeout: 30 * time.Second}
	sf := surfaceFlags{codeMode: mode}
	surface, err := sf.surface(ctx, g, nc)
	require.NoError(t, err)
	p, err := producer.New(nc, &producer.Config{Subjects: g.subjects(), Logger: log})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	s, err := newMCPServe(nc, p, g.subjects(), surface, log, nil)
	require.NoError(t, err)

	b := &mcpBundle{p: p, progress: make(chan string, 64)}
	opts := &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
			select {
			case b.progress <- req.Params.Message:
			default:
			}
		},
	}
	if len(elicit) > 0 {
		opts.ElicitationHandler = elicit[0]
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts)
	var transport sdk.Transport
	if overHTTP {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		sctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { _ = s.serveHTTP(sctx, ln) })
		t.Cleanup(func() { stop(); wg.Wait() })
		transport = &sdk.StreamableClientTransport{Endpoint: "http://" + ln.Addr().String() + "/mcp", MaxRetries: -1}
	} else {
		st, ct := sdk.NewInMemoryTransports()
		ss, err := s.server.Connect(ctx, st, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = ss.Close() })
		transport = ct
	}
	var sopts *sdk.ClientSessionOptions
	if version != "" {
		sopts = &sdk.ClientSessionOptions{ProtocolVersion: version}
	}
	b.cs, err = client.Connect(ctx, transport, sopts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.cs.Close() })
	b.session = s.stdio
	if overHTTP {
		require.NotEmpty(t, b.cs.ID())
		b.session = "mcp-" + b.cs.ID()
	}
	return b
}

func (b *mcpBundle) tools(t *testing.T) []string {
	t.Helper()
	res, err := b.cs.ListTools(testutil.Context(t, 10*time.Second), nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		require.NotEmpty(t, tool.Meta[tooldefs.MetaTool], tool.Name)
	}
	return names
}

func (b *mcpBundle) call(t *testing.T, name string, args any) *sdk.CallToolResult {
	t.Helper()
	res, err := b.cs.CallTool(testutil.Context(t, 30*time.Second), &sdk.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	return res
}

func structured(t *testing.T, res *sdk.CallToolResult, v any) {
	t.Helper()
	data, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, v), string(data))
}

func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

var jobInProgress = regexp.MustCompile(`^job ([A-Za-z0-9_-]+) is running$`)

// testMCPServe runs the calls of both surfaces against one bus.
func testMCPServe(t *testing.T, overHTTP bool) {
	t.Helper()
	url := startCodeModeBus(t)

	t.Run("direct tools", func(t *testing.T) {
		t.Parallel()
		b := mcpSetup(t, url, "false", overHTTP)
		names := b.tools(t)
		for _, want := range []string{"noop", "sleep", "code_execution", "exec"} {
			require.Contains(t, names, want)
		}
		require.NotContains(t, names, "code_mode_exec")

		res := b.call(t, "noop", map[string]any{"hello": "mcp"})
		require.False(t, res.IsError, text(res))
		var echo map[string]string
		structured(t, res, &echo)
		require.Equal(t, "mcp", echo["hello"])
		require.JSONEq(t, `{"hello":"mcp"}`, text(res))

		res = b.call(t, "sleep", map[string]any{"ms": -5})
		require.True(t, res.IsError)
		require.Contains(t, text(res), "invalid_input")

		// A call the client cancels cancels its job: the progress
		// notification of its running event names the job.
		ctx, cancel := context.WithCancel(testutil.Context(t, 30*time.Second))
		defer cancel()
		params := &sdk.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 60000}}
		params.SetProgressToken("sleep-1")
		errc := make(chan error, 1)
		go func() {
			_, err := b.cs.CallTool(ctx, params)
			errc <- err
		}()
		var jobID string
		for jobID == "" {
			select {
			case msg := <-b.progress:
				if m := jobInProgress.FindStringSubmatch(msg); m != nil {
					jobID = m[1]
				}
			case err := <-errc:
				t.Fatalf("the call ended before it ran: %v", err)
			}
		}
		cancel()
		require.Error(t, <-errc)
		ev, err := b.p.Await(testutil.Context(t, 20*time.Second), b.session, jobID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCancelled, ev.Data.Status)
		require.Equal(t, "sleep", ev.Data.Tool)
	})

	t.Run("approval", func(t *testing.T) {
		t.Parallel()
		b := mcpSetup(t, url, "false", overHTTP)
		res := b.call(t, "exec", map[string]any{"command": "uname -s"})
		require.False(t, res.IsError, text(res))
		var pending map[string]string
		structured(t, res, &pending)
		require.Equal(t, "approval_pending", pending["status"])
		require.NotEmpty(t, pending["approvalId"])
		require.Equal(t, "toolq approve "+pending["approvalId"], pending["approve"])
		require.Equal(t, b.session, pending["session"])
		require.Contains(t, text(res), "toolq approve "+pending["approvalId"])

		// A client that supports elicitation is asked first; declined, the
		// call returns the pending approval all the same.
		asked := make(chan string, 1)
		b = mcpSetup(t, url, "false", overHTTP, func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			asked <- req.Params.Message
			return &sdk.ElicitResult{Action: "decline"}, nil
		})
		res = b.call(t, "exec", map[string]any{"command": "uname -s"})
		pending = nil
		structured(t, res, &pending)
		require.Equal(t, "approval_pending", pending["status"])
		select {
		case msg := <-asked:
			require.Contains(t, msg, "toolq approve "+pending["approvalId"])
		default:
			t.Fatal("the client was not asked")
		}
	})

	t.Run("code mode", func(t *testing.T) {
		t.Parallel()
		b := mcpSetup(t, url, "true", overHTTP)
		require.Equal(t, []string{"code_mode_exec", "code_mode_wait"}, b.tools(t))

		res := b.call(t, "code_mode_exec", map[string]any{
			"code": `const r = await tools.callValue("toolq:core:noop", {n: 41}); return r.n + 1;`,
		})
		require.False(t, res.IsError, text(res))
		var r contracts.CodeModeResult
		structured(t, res, &r)
		for r.Status == contracts.CodeModeWaiting {
			require.NotEmpty(t, r.RunID)
			res = b.call(t, "code_mode_wait", map[string]any{"runId": r.RunID})
			require.False(t, res.IsError, text(res))
			r = contracts.CodeModeResult{}
			structured(t, res, &r)
		}
		require.Equal(t, contracts.CodeModeCompleted, r.Status, text(res))
		require.JSONEq(t, `42`, string(r.Value))
		require.Equal(t, 1, r.Telemetry.NestedCalls)

		res = b.call(t, "code_mode_exec", map[string]any{"code": `throw new Error("boom")`})
		require.True(t, res.IsError)
		r = contracts.CodeModeResult{}
		structured(t, res, &r)
		require.Equal(t, contracts.CodeModeFailed, r.Status)
		require.Contains(t, r.Error, "boom")

		res = b.call(t, "code_mode_wait", map[string]any{"runId": "no-such-run"})
		require.True(t, res.IsError)
		require.Contains(t, text(res), "invalid_input")

		_, err := b.cs.CallTool(testutil.Context(t, 10*time.Second), &sdk.CallToolParams{Name: "noop", Arguments: map[string]any{}})
		require.Error(t, err, "a tool of the other surface is not there")
	})
}

func TestMCPServeInMemory(t *testing.T) {
	t.Parallel()
	testMCPServe(t, false)
}

func TestMCPServeStreamableHTTP(t *testing.T) {
	t.Parallel()
	testMCPServe(t, true)
}

func TestMCPServeRefusesRemoteListen(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:8765", ":8765", "192.0.2.1:8765", "[::]:8765", "example.com:8765"} {
		code, _, errOut := run(t, "--nats", "nats://127.0.0.1:1", "mcp", "serve", "--http", addr)
		require.Equal(t, 2, code, addr)
		require.Contains(t, errOut, "no authentication", addr)
	}
	require.NoError(t, checkListen("127.0.0.1:0", false))
	require.NoError(t, checkListen("[::1]:8765", false))
	require.NoError(t, checkListen("localhost:8765", false))
	require.NoError(t, checkListen("0.0.0.0:8765", true))
}

func TestMCPSessionIDs(t *testing.T) {
	t.Parallel()
	s := &mcpServe{stdio: "mcp-stdio"}
	require.Equal(t, "mcp-stdio", s.session(nil))
	s.cfg.Session = "fixed"
	require.Equal(t, "fixed", s.session(nil))
	_, err := newMCPServe(nil, nil, contracts.Subjects{}, &tooldefs.Surface{}, slog.New(slog.DiscardHandler), &mcpServeConfig{Session: "a.b"})
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
}

// TestToolsExport exports the tools of a real worker's catalog in every
// format and gives them to the servers that check each provider's rules.
func TestToolsExport(t *testing.T) {
	t.Parallel()
	url := startCodeModeBus(t)
	srv := tooldefstest.Start(t)
	for _, mode := range []string{"true", "false"} {
		for _, format := range tooldefs.Formats {
			code, out, errOut := run(t, "--nats", url, "tools", "export", "--format", format, "--code-mode", mode)
			require.Equal(t, 0, code, errOut)
			if format == tooldefs.FormatMCP {
				require.NoError(t, tooldefstest.CheckMCP(t.Context(), json.RawMessage(out)))
			} else {
				require.NoError(t, srv.Post(format, json.RawMessage(out)), "%s --code-mode %s", format, mode)
			}
			if format != tooldefs.FormatAnthropic {
				continue
			}
			var tools []struct {
				Name        string `json:"name"`
				Description string `json:"description"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &tools))
			var names []string
			for _, tool := range tools {
				names = append(names, tool.Name)
			}
			if mode == "true" {
				require.Equal(t, []string{"code_mode_exec", "code_mode_wait"}, names)
				require.Contains(t, tools[0].Description, "- toolq:core:sleep({ ms: number }) → { slept_ms: number }")
				require.Contains(t, tools[0].Description, "- toolq:core:code_execution({")
				require.NotContains(t, tools[0].Description, "toolq:core:exec(")
			} else {
				require.Subset(t, names, []string{"code_execution", "exec", "noop", "sleep"})
				require.False(t, slices.Contains(names, "code_mode_exec"))
			}
		}
	}
	code, _, errOut := run(t, "--nats", url, "tools", "export", "--format", "cohere")
	require.Equal(t, 2, code, errOut)
	code, _, errOut = run(t, "--nats", url, "tools", "export", "--code-mode", "sometimes")
	require.Equal(t, 2, code, errOut)
	for _, args := range [][]string{{"tools", "export", "--format", "cohere"}, {"mcp", "serve", "--http", "0.0.0.0:1"}} {
		code, out, errOut := run(t, append([]string{"--nats", url, "--json"}, args...)...)
		require.Equal(t, 2, code, errOut)
		require.Empty(t, out)
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(errOut), &e), errOut)
		require.Equal(t, "invalid_input", e.Error.Code)
	}
}

// bearerTransport adds a bearer token to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPServeBearerToken: with a token, the streamable HTTP endpoint
// answers 401 (naming the Bearer scheme) to a request without it or with
// another, and serves a client that sends it; a non-loopback address is
// then allowed, and a short token is refused.
func TestMCPServeBearerToken(t *testing.T) {
	t.Parallel()
	url := startCodeModeBus(t)
	ctx := testutil.Context(t, 60*time.Second)
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	log := slog.New(slog.DiscardHandler)
	g := &globals{prefix: contracts.DefaultPrefix, log: log, stdout: io.Discard, stderr: io.Discard, timeout: 30 * time.Second}
	surface, err := (&surfaceFlags{codeMode: "true"}).surface(ctx, g, nc)
	require.NoError(t, err)
	p, err := producer.New(nc, &producer.Config{Subjects: g.subjects(), Logger: log})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	const token = "s3cret-token-0123456789"
	s, err := newMCPServe(nc, p, g.subjects(), surface, log, &mcpServeConfig{Token: token})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	sctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.serveHTTP(sctx, ln) })
	t.Cleanup(func() { stop(); wg.Wait() })
	endpoint := "http://" + ln.Addr().String() + "/mcp"

	for _, auth := range []string{"", "Bearer wrong-token-0123456789", "Basic " + token} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, auth)
		require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{
		Endpoint: endpoint, MaxRetries: -1, HTTPClient: &http.Client{Transport: bearerTransport{token}},
	}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	res, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	require.NotEmpty(t, res.Tools)

	// A token allows a non-loopback address; a short one is refused.
	tokFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokFile, []byte("short\n"), 0o600))
	code, _, errOut := run(t, "--nats", "nats://127.0.0.1:1", "mcp", "serve", "--http", "0.0.0.0:1", "--http-token-file", tokFile)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "at least 16 bytes")
	require.NoError(t, os.WriteFile(tokFile, []byte(token+"\n"), 0o600))
	code, _, errOut = run(t, "--nats", "nats://127.0.0.1:1", "--timeout", "1s", "mcp", "serve", "--http", "0.0.0.0:1", "--http-token-file", tokFile)
	require.NotContains(t, errOut, "not a loopback address", "with a token the address passes (the connect then fails)")
	require.NotEqual(t, 0, code)
	code, _, errOut = run(t, "--nats", "nats://127.0.0.1:1", "mcp", "serve", "--http-token-file", tokFile)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "is for --http")
}

var approveCommand = regexp.MustCompile("`toolq approve ([A-Za-z0-9_-]+)`")

// TestMCPServeApprovalInResult: on protocol 2026-07-28, where a server may
// not send an elicitation request of its own, an exec call that waits for
// approval asks in its result (an input request, SEP-2322): the client's
// person approves it with their key and accepts, the client retries with
// the answer, and the call returns the command's result. Declined, it
// returns the pending approval; a retry whose requestState this server did
// not sign is refused. Over HTTP (2025-11-25) the same happens through the
// server's own elicitation request.
func TestMCPServeApprovalInResult(t *testing.T) {
	t.Parallel()
	url, seed := startExecBus(t)
	for _, overHTTP := range []bool{false, true} {
		name := "in memory"
		if overHTTP {
			name = "http"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			approve := make(chan bool, 4)
			asked := make(chan string, 4)
			b := mcpSetupVersion(t, url, "false", overHTTP, "", func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
				m := approveCommand.FindStringSubmatch(req.Params.Message)
				if m == nil {
					return nil, fmt.Errorf("no approval in %q", req.Params.Message)
				}
				asked <- m[1]
				if !<-approve {
					return &sdk.ElicitResult{Action: "decline"}, nil
				}
				//nolint:contextcheck // the command under test makes its own context, as on a terminal
				if code, _, errOut := run(t, "--nats", url, "approve", m[1], "--seed-file", seed, "--yes"); code != 0 {
					return nil, fmt.Errorf("approve: %s", errOut)
				}
				return &sdk.ElicitResult{Action: "accept"}, nil
			})
			// The go-sdk serves 2026-07-28 over HTTP only without sessions,
			// and this endpoint keeps them (each is a toolq session): HTTP
			// clients speak 2025-11-25 and get the server's own question.
			want := "2026-07-28"
			if overHTTP {
				want = "2025-11-25"
			}
			require.Equal(t, want, b.cs.InitializeResult().ProtocolVersion)

			approve <- true
			res := b.call(t, "exec", map[string]any{"command": "uname -s"})
			require.False(t, res.IsError, text(res))
			var done map[string]any
			structured(t, res, &done)
			require.NotEqual(t, "approval_pending", done["status"], text(res))
			require.Contains(t, text(res), "Linux")
			require.NotEmpty(t, <-asked)

			approve <- false
			res = b.call(t, "exec", map[string]any{"command": "uname -s"})
			var pending map[string]string
			structured(t, res, &pending)
			require.Equal(t, "approval_pending", pending["status"])
			require.Equal(t, <-asked, pending["approvalId"])
			require.Equal(t, b.session, pending["session"])

			forged, err := b.cs.CallTool(testutil.Context(t, 10*time.Second), &sdk.CallToolParams{
				Name: "exec", Arguments: map[string]any{"command": "uname -s"}, RequestState: "eyJqIjoieCJ9.AAAA",
			})
			require.NoError(t, err)
			require.True(t, forged.IsError)
			require.Contains(t, text(forged), "requestState")
		})
	}
}
