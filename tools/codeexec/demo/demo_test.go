package demo_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/tools/codeexec/demo"
	"github.com/toolq/toolq/tools/codeexec/provider"
	"github.com/toolq/toolq/tools/codeexec/xai"
)

func start(t *testing.T) *demo.Server {
	t.Helper()
	s, err := demo.NewServer(&demo.Config{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(ctx))
	})
	return s
}

// TestXAIClientGetsLabelledAnswer: the real xai client, pointed at the
// server, sends a request the server accepts and parses its answer: the
// label, the program that prints the task, its output, no cost.
func TestXAIClientGetsLabelledAnswer(t *testing.T) {
	t.Parallel()
	s := start(t)
	require.True(t, strings.HasPrefix(s.URL(), "http://127.0.0.1:"), s.URL())
	c := xai.New(&xai.Config{BaseURL: s.URL()})
	task := `mean of "1, 2, 3" — ünïcode`
	r, err := c.Execute(context.Background(), &provider.Request{Task: task, APIKey: s.APIKey(), MaxTurns: 2})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(r.Content, demo.Label), r.Content)
	require.Contains(t, r.Content, task)
	require.Equal(t, xai.DefaultModel, r.Model)
	require.True(t, r.UsedCodeExecution)
	require.Len(t, r.Runs, 1)
	require.Equal(t, provider.OutcomeOK, r.Runs[0].Outcome)
	require.Equal(t, task+"\n", r.Runs[0].Output)
	require.Contains(t, r.Runs[0].Code, "print(")
	require.NotNil(t, r.Usage.CostUSD)
	require.Zero(t, *r.Usage.CostUSD)
	require.Zero(t, r.Usage.InputTokens+r.Usage.OutputTokens)
}

// TestWrongKeyIsAnAuthError: the client sees the server's 401 as the
// provider's own auth failure.
func TestWrongKeyIsAnAuthError(t *testing.T) {
	t.Parallel()
	s := start(t)
	_, err := xai.New(&xai.Config{BaseURL: s.URL()}).Execute(context.Background(), &provider.Request{Task: "t", APIKey: "xai-not-the-demo-key"})
	var perr *provider.Error
	require.ErrorAs(t, err, &perr)
	require.Equal(t, provider.KindAuth, perr.Kind)
	require.Equal(t, http.StatusUnauthorized, perr.Status)
	require.Contains(t, perr.Message, "incorrect API key")
}

// TestRefusesBadRequests: each request the API would refuse gets its
// status and an xAI-shaped error body.
func TestRefusesBadRequests(t *testing.T) {
	t.Parallel()
	s, err := demo.NewServer(&demo.Config{APIKey: "demo-key"})
	require.NoError(t, err)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	good := `{"model":"grok-4.6","input":[{"role":"user","content":"hi"}],"tools":[{"type":"code_interpreter"}],"store":false,"include":["code_interpreter_call.outputs"]}`
	auth := "Bearer demo-key"
	for _, tc := range []struct {
		name, method, path, auth, ctype, body string
		status                                int
		msg                                   string
	}{
		{"good", "POST", demo.Path, auth, "application/json", good, 200, demo.Label},
		{"good string input", "POST", demo.Path, auth, "application/json; charset=utf-8", `{"model":"m","input":"hi"}`, 200, demo.Label},
		{"no auth", "POST", demo.Path, "", "application/json", good, 401, "no API key"},
		{"not bearer", "POST", demo.Path, "Basic demo-key", "application/json", good, 401, "incorrect API key"},
		{"wrong key", "POST", demo.Path, "Bearer other", "application/json", good, 401, "incorrect API key"},
		{"wrong path", "POST", "/v1/chat/completions", auth, "application/json", good, 404, "no such endpoint"},
		{"wrong method", "GET", demo.Path, auth, "", "", 405, "not allowed"},
		{"not json type", "POST", demo.Path, auth, "text/plain", good, 415, "application/json"},
		{"not json", "POST", demo.Path, auth, "application/json", `{"model":`, 400, "invalid JSON"},
		{"trailing data", "POST", demo.Path, auth, "application/json", good + `{}`, 400, "data after"},
		{"unknown field", "POST", demo.Path, auth, "application/json", `{"model":"m","input":"hi","max_turn":2}`, 400, "max_turn"},
		{"no model", "POST", demo.Path, auth, "application/json", `{"input":"hi"}`, 400, "model is required"},
		{"no input", "POST", demo.Path, auth, "application/json", `{"model":"m"}`, 400, "input is required"},
		{"input object", "POST", demo.Path, auth, "application/json", `{"model":"m","input":{"role":"user"}}`, 400, "a string or a list"},
		{"bad role", "POST", demo.Path, auth, "application/json", `{"model":"m","input":[{"role":"robot","content":"hi"}]}`, 400, "role"},
		{"no user text", "POST", demo.Path, auth, "application/json", `{"model":"m","input":[{"role":"system","content":"hi"}]}`, 400, "no user message"},
		{"tool without type", "POST", demo.Path, auth, "application/json", `{"model":"m","input":"hi","tools":[{}]}`, 400, "tools[0]"},
		{"bad include", "POST", demo.Path, auth, "application/json", `{"model":"m","input":"hi","include":["everything"]}`, 400, "include"},
		{"bad effort", "POST", demo.Path, auth, "application/json", `{"model":"m","input":"hi","reasoning":{"effort":"max"}}`, 400, "effort"},
		{"zero turns", "POST", demo.Path, auth, "application/json", `{"model":"m","input":"hi","max_turns":0}`, 400, "max_turns"},
		{"stream", "POST", demo.Path, auth, "application/json", `{"model":"m","input":"hi","stream":true}`, 400, "stream"},
		{"too large", "POST", demo.Path, auth, "application/json", `{"model":"m","input":"` + strings.Repeat("a", demo.MaxBodyBytes) + `"}`, 413, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequestWithContext(context.Background(), tc.method, hs.URL+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			resp, err := hs.Client().Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, tc.status, resp.StatusCode, string(b))
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			require.Contains(t, string(b), tc.msg)
			if tc.status != 200 {
				require.Contains(t, string(b), `"error":`)
				require.NotContains(t, string(b), `"output"`)
			}
		})
	}
}

// TestListenOnlyOnLoopback: the server refuses to listen beyond this host.
func TestListenOnlyOnLoopback(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "example.com:0", "nohost"} {
		_, err := demo.NewServer(&demo.Config{Listen: addr})
		require.Error(t, err, addr)
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "localhost:0"} {
		_, err := demo.NewServer(&demo.Config{Listen: addr})
		require.NoError(t, err, addr)
	}
}

// TestStopIsIdempotent: Stop before Start and twice is harmless; Start twice fails.
func TestStopIsIdempotent(t *testing.T) {
	t.Parallel()
	s, err := demo.NewServer(nil)
	require.NoError(t, err)
	require.NoError(t, s.Stop(context.Background()))
	require.NoError(t, s.Start(context.Background()))
	require.Error(t, s.Start(context.Background()))
	require.NoError(t, s.Stop(context.Background()))
	require.NoError(t, s.Stop(context.Background()))
}
