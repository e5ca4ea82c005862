package anthropic_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/tools/codeexec/anthropic"
	"github.com/toolq/toolq/tools/codeexec/internal/providertest"
	"github.com/toolq/toolq/tools/codeexec/provider"
)

// answer is a recorded-shape Messages body for s (tool version
// code_execution_20250825: bash sub-tool).
func answer(s providertest.Scenario) []byte {
	content := []any{
		map[string]any{"type": "server_tool_use", "id": "srvtoolu_01", "name": "bash_code_execution", "input": map[string]any{"command": s.Code}},
		map[string]any{"type": "bash_code_execution_tool_result", "tool_use_id": "srvtoolu_01", "content": map[string]any{
			"type": "bash_code_execution_result", "stdout": s.Output, "stderr": "", "return_code": 0, "content": []any{},
		}},
	}
	for i, text := range s.Texts {
		block := map[string]any{"type": "text", "text": text}
		if i < len(s.Citations) {
			block["citations"] = []any{map[string]any{"type": "web_search_result_location", "url": s.Citations[i], "title": "src", "cited_text": "x"}}
		}
		content = append(content, block)
	}
	body := map[string]any{
		"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
		"content": content, "stop_reason": "end_turn", "stop_sequence": nil,
		"usage":     map[string]any{"input_tokens": s.InputTokens, "output_tokens": s.OutputTokens},
		"container": map[string]any{"id": "container_01", "expires_at": "2026-12-02T12:00:00Z"},
	}
	b, _ := json.Marshal(body)
	return b
}

func errorBody(_ int, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": msg}})
	return b
}

const noText = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"server_tool_use","id":"s1","name":"bash_code_execution","input":{"command":"ls"}}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`

func TestSuite(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Harness{
		Name: provider.Anthropic,
		New: func(base string, hc *http.Client, log *slog.Logger) provider.Client {
			return anthropic.New(&anthropic.Config{BaseURL: base, HTTPClient: hc, Logger: log})
		},
		Path:      func(string) string { return "/v1/messages" },
		APIKey:    func(r *http.Request) string { return r.Header.Get("x-api-key") },
		Answer:    answer,
		NoText:    []byte(noText),
		ErrorBody: errorBody,
		Model:     "claude-sonnet-4-5",
	})
}

func TestRequestHeadersAndBody(t *testing.T) {
	t.Parallel()
	srv := providertest.NewServer(t, providertest.JSON(200, answer(providertest.Canonical)))
	c := anthropic.New(&anthropic.Config{BaseURL: srv.URL})
	r, err := c.Execute(context.Background(), &provider.Request{Task: "mean", APIKey: "sk-ant-test"}) //nolint:gosec // G101: a fake key for a test server
	require.NoError(t, err)
	require.Equal(t, "claude-sonnet-4-5-20250929", r.Model)
	req := srv.Requests()[0]
	require.Equal(t, "sk-ant-test", req.Header.Get("x-api-key"))
	require.Equal(t, "2023-06-01", req.Header.Get("anthropic-version"))
	require.Equal(t, "code-execution-2025-08-25", req.Header.Get("anthropic-beta"))
	require.Empty(t, req.Header.Get("Authorization"))
	require.JSONEq(t, `{
		"model": "claude-sonnet-4-5",
		"max_tokens": 4096,
		"messages": [{"role": "user", "content": "mean"}],
		"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]
	}`, string(req.Body))
}

// A pause_turn is continued: the content goes back as the assistant turn,
// in the same container, and the answers are merged.
func TestPauseTurnContinues(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	first := `{"model":"claude-sonnet-4-5","stop_reason":"pause_turn","container":{"id":"container_9"},
	 "content":[{"type":"server_tool_use","id":"s1","name":"bash_code_execution","input":{"command":"python slow.py"}},
	            {"type":"bash_code_execution_tool_result","tool_use_id":"s1","content":{"type":"bash_code_execution_result","stdout":"step 1\n","stderr":"","return_code":0,"content":[{"type":"bash_code_execution_output","file_id":"file_1"}]}}],
	 "usage":{"input_tokens":10,"output_tokens":3}}`
	second := `{"model":"claude-sonnet-4-5","stop_reason":"end_turn",
	 "content":[{"type":"text","text":"All done."}],"usage":{"input_tokens":20,"output_tokens":4}}`
	srv := providertest.NewServer(t, func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1) == 1 {
			_, _ = w.Write([]byte(first))
			return
		}
		_, _ = w.Write([]byte(second))
	})
	c := anthropic.New(&anthropic.Config{BaseURL: srv.URL})
	r, err := c.Execute(context.Background(), &provider.Request{Task: "long job", APIKey: "k"})
	require.NoError(t, err)
	require.Equal(t, "All done.", r.Content)
	require.Len(t, r.Runs, 1)
	require.Equal(t, "python slow.py", r.Runs[0].Code)
	require.Equal(t, "bash", r.Runs[0].Language)
	require.Equal(t, []provider.Image{{FileID: "file_1"}}, r.Runs[0].Images)
	require.Equal(t, int64(30), r.Usage.InputTokens)
	require.Equal(t, int64(7), r.Usage.OutputTokens)

	reqs := srv.Requests()
	require.Len(t, reqs, 2)
	var cont struct {
		Container string `json:"container"`
		Messages  []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal(reqs[1].Body, &cont))
	require.Equal(t, "container_9", cont.Container)
	require.Len(t, cont.Messages, 2)
	require.Equal(t, "assistant", cont.Messages[1].Role)
	require.Contains(t, string(cont.Messages[1].Content), "python slow.py")
}

func TestPauseTurnLimit(t *testing.T) {
	t.Parallel()
	paused := `{"model":"m","stop_reason":"pause_turn","content":[{"type":"text","text":"partial"}]}`
	srv := providertest.NewServer(t, providertest.JSON(200, []byte(paused)))
	c := anthropic.New(&anthropic.Config{BaseURL: srv.URL})
	r, err := c.Execute(context.Background(), &provider.Request{Task: "t", MaxTurns: 2, APIKey: "k"})
	require.NoError(t, err)
	require.Len(t, srv.Requests(), 3, "the first request and two continuations")
	require.Equal(t, "partialpartialpartial", r.Content)
}

func TestParseResultKinds(t *testing.T) {
	t.Parallel()
	body := `{"model":"m","content":[
	 {"type":"server_tool_use","id":"a","name":"bash_code_execution","input":{"command":"exit 3"}},
	 {"type":"bash_code_execution_tool_result","tool_use_id":"a","content":{"type":"bash_code_execution_result","stdout":"","stderr":"boom","return_code":3,"content":[]}}, 
	 {"type":"server_tool_use","id":"b","name":"bash_code_execution","input":{"command":"sleep 999"}},
	 {"type":"bash_code_execution_tool_result","tool_use_id":"b","content":{"type":"bash_code_execution_tool_result_error","error_code":"execution_time_exceeded"}},
	 {"type":"server_tool_use","id":"c","name":"text_editor_code_execution","input":{"command":"create","path":"a.py","file_text":"print(2)"}},
	 {"type":"text_editor_code_execution_tool_result","tool_use_id":"c","content":{"type":"text_editor_code_execution_result","is_file_update":false}},
	 {"type":"server_tool_use","id":"d","name":"code_execution","input":{"code":"print(4)"}},
	 {"type":"code_execution_tool_result","tool_use_id":"d","content":{"type":"code_execution_result","stdout":"4\n","stderr":"","return_code":0,"content":[]}},
	 {"type":"server_tool_use","id":"e","name":"bash_code_execution","input":{"command":"x"}},
	 {"type":"bash_code_execution_tool_result","tool_use_id":"e","content":{"type":"bash_code_execution_tool_result_error","error_code":"unavailable"}},
	 {"type":"text","text":"Summary."}]}`
	r, err := anthropic.Parse([]byte(body), "m")
	require.NoError(t, err)
	require.Len(t, r.Runs, 5)
	require.Equal(t, provider.OutcomeFailed, r.Runs[0].Outcome)
	require.Equal(t, "boom", r.Runs[0].Output)
	require.Equal(t, provider.OutcomeDeadlineExceeded, r.Runs[1].Outcome)
	require.Equal(t, "text_editor", r.Runs[2].Language)
	require.Equal(t, "create a.py\nprint(2)", r.Runs[2].Code)
	require.Equal(t, provider.OutcomeOK, r.Runs[2].Outcome)
	require.Equal(t, "python", r.Runs[3].Language)
	require.Equal(t, "4\n", r.Runs[3].Output)
	require.Equal(t, provider.OutcomeFailed, r.Runs[4].Outcome)
	require.Equal(t, "unavailable", r.Runs[4].Output)
	require.Equal(t, int64(5), r.Usage.ToolCalls)
	require.Equal(t, []string{"server_tool_use", "bash_code_execution_tool_result", "text_editor_code_execution_tool_result", "code_execution_tool_result", "text"}, r.OutputTypes)
}

func TestOverloadedIsServerFault(t *testing.T) {
	t.Parallel()
	srv := providertest.NewServer(t, providertest.JSON(529, errorBody(529, "Overloaded")))
	_, err := anthropic.New(&anthropic.Config{BaseURL: srv.URL}).Execute(context.Background(), &provider.Request{Task: "t", APIKey: "k"})
	require.ErrorIs(t, err, provider.ErrServer)
}

func FuzzParse(f *testing.F) {
	f.Add(answer(providertest.Canonical))
	f.Add([]byte(noText))
	f.Add([]byte(`{"content":[{"type":"bash_code_execution_tool_result","tool_use_id":"zz","content":"x"},{"type":"text","text":"a"}]}`))
	f.Add([]byte(`{"content":[7]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := anthropic.Parse(data, "m")
		if err != nil {
			var pe *provider.Error
			require.ErrorAs(t, err, &pe)
			return
		}
		require.NotEmpty(t, strings.TrimSpace(r.Content))
	})
}
