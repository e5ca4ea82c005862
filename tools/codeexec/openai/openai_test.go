package openai_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/tools/codeexec/internal/providertest"
	"github.com/toolq/toolq/tools/codeexec/openai"
	"github.com/toolq/toolq/tools/codeexec/provider"
)

// answer is a recorded-shape OpenAI Responses body for s: plain-text logs,
// a container id on the call.
func answer(s providertest.Scenario) []byte {
	var parts []any
	for i, text := range s.Texts {
		ann := []any{}
		if i < len(s.Citations) {
			ann = append(ann, map[string]any{"type": "url_citation", "url": s.Citations[i], "start_index": 0, "end_index": 1, "title": "source"})
		}
		parts = append(parts, map[string]any{"type": "output_text", "text": text, "annotations": ann})
	}
	body := map[string]any{
		"id": "resp_68af", "object": "response", "created_at": 1764670000, "model": "gpt-4.1-2025-04-14", "status": "completed",
		"output": []any{
			map[string]any{
				"type": "code_interpreter_call", "id": "ci_68af", "status": "completed", "code": s.Code,
				"container_id": "cntr_68af", "outputs": []any{map[string]any{"type": "logs", "logs": s.Output}},
			},
			map[string]any{"type": "message", "id": "msg_68af", "role": "assistant", "status": "completed", "content": append(parts,
				map[string]any{"type": "output_text", "text": "", "annotations": []any{map[string]any{"type": "container_file_citation", "container_id": "cntr_68af", "file_id": "cfile_1", "filename": "out.csv"}}})},
		},
		"usage": map[string]any{
			"input_tokens": s.InputTokens, "output_tokens": s.OutputTokens, "total_tokens": s.InputTokens + s.OutputTokens,
			"output_tokens_details": map[string]any{"reasoning_tokens": 0},
		},
	}
	b, _ := json.Marshal(body)
	return b
}

func errorBody(_ int, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": nil, "code": nil}})
	return b
}

const noText = `{"id":"resp_1","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"type":"reasoning","summary":[]}]}`

func TestSuite(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Harness{
		Name: provider.OpenAI,
		New: func(base string, hc *http.Client, log *slog.Logger) provider.Client {
			return openai.New(&openai.Config{BaseURL: base, HTTPClient: hc, Logger: log})
		},
		Path:      func(string) string { return "/v1/responses" },
		APIKey:    func(r *http.Request) string { return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") },
		Answer:    answer,
		NoText:    []byte(noText),
		ErrorBody: errorBody,
		Model:     "gpt-4.1",
	})
}

func TestRequestBody(t *testing.T) {
	t.Parallel()
	srv := providertest.NewServer(t, providertest.JSON(200, answer(providertest.Canonical)))
	c := openai.New(&openai.Config{BaseURL: srv.URL})
	r, err := c.Execute(context.Background(), &provider.Request{Task: "t", MaxTurns: 3, APIKey: "sk-test"})
	require.NoError(t, err)
	require.Equal(t, "gpt-4.1-2025-04-14", r.Model)
	require.JSONEq(t, `{
		"model": "gpt-4.1",
		"input": [{"role": "user", "content": "t"}],
		"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}],
		"store": false,
		"include": ["code_interpreter_call.outputs"],
		"max_tool_calls": 3
	}`, string(srv.Requests()[0].Body))
}

func TestParseOutcomesFromStatus(t *testing.T) {
	t.Parallel()
	body := `{"output":[
	 {"type":"code_interpreter_call","status":"failed","code":"x","outputs":[{"type":"logs","logs":"Traceback"}]},
	 {"type":"code_interpreter_call","status":"incomplete","code":"y","outputs":null},
	 {"type":"code_interpreter_call","status":"completed","code":"z","outputs":[{"type":"image","url":"https://img.example/p.png"}]},
	 {"type":"message","content":[{"type":"output_text","text":"ok"}]}]}`
	r, err := openai.Parse([]byte(body), "gpt-4.1")
	require.NoError(t, err)
	require.Equal(t, "gpt-4.1", r.Model, "requested model when the body names none")
	require.Equal(t, provider.OutcomeFailed, r.Runs[0].Outcome)
	require.Equal(t, "Traceback", r.Runs[0].Output)
	require.Equal(t, provider.OutcomeUnspecified, r.Runs[1].Outcome)
	require.Equal(t, provider.OutcomeOK, r.Runs[2].Outcome)
	require.Equal(t, "https://img.example/p.png", r.Runs[2].Images[0].URL)
	require.Nil(t, r.Usage.CostUSD)
}

func TestParseFailedResponse(t *testing.T) {
	t.Parallel()
	_, err := openai.Parse([]byte(`{"status":"failed","error":{"code":"server_error","message":"The model failed"},"output":[]}`), "gpt-4.1")
	require.ErrorIs(t, err, provider.ErrServer)
	require.Contains(t, err.Error(), "The model failed")
}

func FuzzParse(f *testing.F) {
	f.Add(answer(providertest.Canonical))
	f.Add([]byte(noText))
	f.Add([]byte(`{"status":"failed","error":"x","output":[]}`))
	f.Add([]byte(`{"output":[{"type":"message","content":[{"type":"output_text","text":"a","annotations":[{"url":"http://a"}]}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := openai.Parse(data, "gpt-4.1")
		if err != nil {
			var pe *provider.Error
			require.ErrorAs(t, err, &pe)
			return
		}
		require.NotEmpty(t, strings.TrimSpace(r.Content))
		require.LessOrEqual(t, len(r.Citations), provider.MaxCitations)
	})
}
