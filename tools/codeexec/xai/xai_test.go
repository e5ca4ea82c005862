package xai_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/tools/codeexec/internal/providertest"
	"github.com/toolq/toolq/tools/codeexec/provider"
	"github.com/toolq/toolq/tools/codeexec/xai"
)

// logsJSON encodes xAI's logs output: a JSON string.
func logsJSON(stdout, stderr string, exit int, timedOut bool) string {
	b, _ := json.Marshal(map[string]any{"stdout": stdout, "stderr": stderr, "exit_code": exit, "command_timed_out": timedOut})
	return string(b)
}

// answer is a recorded-shape xAI Responses body for s.
func answer(s providertest.Scenario) []byte {
	var parts []any
	for i, text := range s.Texts {
		var ann []any
		if i < len(s.Citations) {
			ann = append(ann, map[string]any{"type": "url_citation", "url": s.Citations[i], "start_index": 0, "end_index": 1, "title": "source"})
		}
		parts = append(parts, map[string]any{"type": "output_text", "text": text, "annotations": ann, "logprobs": []any{}})
	}
	body := map[string]any{
		"id": "resp_7f3c", "object": "response", "created_at": 1764670000, "model": "grok-4.6", "status": "completed",
		"output": []any{
			map[string]any{"type": "reasoning", "id": "rs_1", "summary": []any{}, "status": "completed"},
			map[string]any{
				"type": "code_interpreter_call", "id": "ci_resp_7f3c_call-0-0", "status": "completed", "code": s.Code,
				"outputs": []any{map[string]any{"type": "logs", "logs": logsJSON(s.Output, "", 0, false)}},
			},
			map[string]any{"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": parts},
		},
		"usage": map[string]any{
			"input_tokens": s.InputTokens, "output_tokens": s.OutputTokens, "total_tokens": s.InputTokens + s.OutputTokens,
			"output_tokens_details":          map[string]any{"reasoning_tokens": 12},
			"num_server_side_tools_used":     1,
			"server_side_tool_usage_details": map[string]any{"code_interpreter_calls": 1},
			"cost_in_usd_ticks":              81834000,
		},
	}
	b, _ := json.Marshal(body)
	return b
}

const noText = `{"id":"resp_1","model":"grok-4.6","status":"completed","output":[{"type":"code_interpreter_call","id":"ci_1","status":"completed","code":"print(1)","outputs":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"  ","annotations":[]}]}]}`

func errorBody(_ int, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"code": "error", "error": msg})
	return b
}

func harness() providertest.Harness {
	return providertest.Harness{
		Name: provider.XAI,
		New: func(base string, hc *http.Client, log *slog.Logger) provider.Client {
			return xai.New(&xai.Config{BaseURL: base, HTTPClient: hc, Logger: log})
		},
		Path:      func(string) string { return "/v1/responses" },
		APIKey:    func(r *http.Request) string { return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") },
		Answer:    answer,
		NoText:    []byte(noText),
		ErrorBody: errorBody,
		Model:     "grok-4.6",
	}
}

func TestSuite(t *testing.T) {
	t.Parallel()
	providertest.Run(t, harness())
}

type body struct {
	Model     string            `json:"model"`
	Input     []json.RawMessage `json:"input"`
	Tools     []map[string]any  `json:"tools"`
	Store     *bool             `json:"store"`
	Include   []string          `json:"include"`
	Reasoning *struct {
		Effort string `json:"effort"`
	} `json:"reasoning"`
	MaxTurns *int `json:"max_turns"`
}

func send(t *testing.T, model string, maxTurns int) (body, map[string]any) {
	t.Helper()
	srv := providertest.NewServer(t, providertest.JSON(200, answer(providertest.Canonical)))
	c := xai.New(&xai.Config{BaseURL: srv.URL})
	_, err := c.Execute(context.Background(), &provider.Request{Task: "mean of 40 42 44", Model: model, MaxTurns: maxTurns, APIKey: "xai-plugin-key"}) //nolint:gosec // G101: a fake key for a test server
	require.NoError(t, err)
	reqs := srv.Requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "Bearer xai-plugin-key", reqs[0].Header.Get("Authorization"))
	var b body
	require.NoError(t, json.Unmarshal(reqs[0].Body, &b))
	var raw map[string]any
	require.NoError(t, json.Unmarshal(reqs[0].Body, &raw))
	return b, raw
}

// Seed 000: the request carries model grok-4.6, store false, reasoning
// effort low, the code_interpreter tool and the task as one user message.
func TestRequestBodyDefaults(t *testing.T) {
	t.Parallel()
	b, raw := send(t, "", 0)
	require.Equal(t, "grok-4.6", b.Model)
	require.NotNil(t, b.Store)
	require.False(t, *b.Store)
	require.NotNil(t, b.Reasoning)
	require.Equal(t, "low", b.Reasoning.Effort)
	require.Equal(t, []map[string]any{{"type": "code_interpreter"}}, b.Tools)
	require.Equal(t, []string{"code_interpreter_call.outputs"}, b.Include)
	require.Len(t, b.Input, 1)
	require.JSONEq(t, `{"role":"user","content":"mean of 40 42 44"}`, string(b.Input[0]))
	require.NotContains(t, raw, "max_turns")
}

func TestRequestBodyMaxTurns(t *testing.T) {
	t.Parallel()
	b, _ := send(t, "grok-4.3", 2)
	require.NotNil(t, b.MaxTurns)
	require.Equal(t, 2, *b.MaxTurns)
	require.Equal(t, "low", b.Reasoning.Effort)
}

// Seed 000: a custom model gets neither reasoning nor max_turns.
func TestRequestBodyCustomModel(t *testing.T) {
	t.Parallel()
	_, raw := send(t, "grok-build-0.1", 0)
	require.Equal(t, "grok-build-0.1", raw["model"])
	require.NotContains(t, raw, "reasoning")
	require.NotContains(t, raw, "max_turns")
}

func TestNormalizeModel(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"":                        "grok-4.6",
		"   ":                     "grok-4.6",
		"grok-4.6":                "grok-4.6",
		" XAI/Grok-4.3-latest ":   "grok-4.3",
		"grok-4.6-latest":         "grok-4.6",
		"grok-build-latest":       "grok-4.5",
		"grok-code-fast-1":        "grok-build-0.1",
		"grok-4-fast-reasoning":   "grok-4-fast",
		"grok-4-1-fast-reasoning": "grok-4-1-fast",
		"grok-build-0.1":          "grok-build-0.1",
	}
	for in, want := range cases {
		require.Equal(t, want, xai.NormalizeModel(in), "model %q", in)
	}
	require.Equal(t, "low", xai.DefaultReasoningEffort("grok-4.6-latest"))
	require.Empty(t, xai.DefaultReasoningEffort("grok-4.5"))
}

func TestParseRunsAndCost(t *testing.T) {
	t.Parallel()
	body := `{"model":"grok-4.6","output":[
	 {"type":"code_interpreter_call","status":"completed","code":"1/0","outputs":[{"type":"logs","logs":` + quote(logsJSON("", "ZeroDivisionError\n", 1, false)) + `}]},
	 {"type":"code_interpreter_call","status":"completed","code":"while True: pass","outputs":[{"type":"logs","logs":` + quote(logsJSON("", "", 137, true)) + `}]},
	 {"type":"code_interpreter_call","status":"completed","code":"plot()","outputs":[{"type":"logs","logs":` + quote(logsJSON("ok\n", "", 0, false)) + `},{"type":"image","url":"https://files.x.ai/img.png"}]},
	 {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Done.","annotations":[{"type":"url_citation","url":"javascript:alert(1)"},{"type":"url_citation","url":"ftp://x"},{"type":"url_citation","url":"https://ok.example/a"}]}]}],
	 "citations":["https://ok.example/a","https://ok.example/b"],
	 "usage":{"input_tokens":10,"output_tokens":5,"cost_in_usd_ticks":81834000}}`
	r, err := xai.Parse([]byte(body), "grok-4.6")
	require.NoError(t, err)
	require.Equal(t, "Done.", r.Content)
	require.Len(t, r.Runs, 3)
	require.Equal(t, provider.OutcomeFailed, r.Runs[0].Outcome)
	require.Equal(t, "ZeroDivisionError\n", r.Runs[0].Output)
	require.Equal(t, provider.OutcomeDeadlineExceeded, r.Runs[1].Outcome)
	require.Equal(t, provider.OutcomeOK, r.Runs[2].Outcome)
	require.Equal(t, []provider.Image{{URL: "https://files.x.ai/img.png"}}, r.Runs[2].Images)
	require.Equal(t, []string{"https://ok.example/a", "https://ok.example/b"}, r.Citations)
	require.Equal(t, []string{"code_interpreter_call", "message"}, r.OutputTypes)
	require.Equal(t, int64(3), r.Usage.ToolCalls)
	require.NotNil(t, r.Usage.CostUSD)
	require.InDelta(t, 0.0081834, *r.Usage.CostUSD, 1e-12)
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Citations: at most 20 kept, each at most 2048 bytes, at most 1000
// annotations scanned.
func TestParseCitationLimits(t *testing.T) {
	t.Parallel()
	var ann []any
	ann = append(ann, map[string]any{"type": "url_citation", "url": "https://long.example/" + strings.Repeat("a", 2048)})
	for i := 0; i < 1000; i++ {
		ann = append(ann, map[string]any{"type": "url_citation", "url": "https://dup.example/"})
	}
	for i := 0; i < 30; i++ {
		ann = append(ann, map[string]any{"type": "url_citation", "url": "https://late.example/" + string(rune('a'+i%26)) + strings.Repeat("x", i)})
	}
	b, _ := json.Marshal(map[string]any{"output": []any{map[string]any{"type": "message", "content": []any{map[string]any{"type": "output_text", "text": "x", "annotations": ann}}}}})
	r, err := xai.Parse(b, "m")
	require.NoError(t, err)
	require.Equal(t, []string{"https://dup.example/"}, r.Citations, "over-long dropped, duplicates kept once, past 1000 not scanned")

	ann = nil
	for i := 0; i < 30; i++ {
		ann = append(ann, map[string]any{"type": "url_citation", "url": "https://many.example/" + strings.Repeat("x", i)})
	}
	b, _ = json.Marshal(map[string]any{"output": []any{map[string]any{"type": "message", "content": []any{map[string]any{"type": "output_text", "text": "x", "annotations": ann}}}}})
	r, err = xai.Parse(b, "m")
	require.NoError(t, err)
	require.Len(t, r.Citations, provider.MaxCitations)
	require.Equal(t, "https://many.example/", r.Citations[0])
}

func FuzzParse(f *testing.F) {
	f.Add(answer(providertest.Canonical))
	f.Add([]byte(noText))
	f.Add([]byte(`{"status":"failed","error":{"message":"boom"},"output":[]}`))
	f.Add([]byte(`{"output":[{"type":"code_interpreter_call","outputs":[{"type":"logs","logs":"{\"stdout\":null}"}]}]}`))
	f.Add([]byte(`{"output":null,"usage":{"cost_in_usd_ticks":-5}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := xai.Parse(data, "grok-4.6")
		if err != nil {
			var pe *provider.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, provider.XAI, pe.Provider)
			return
		}
		require.NotEmpty(t, strings.TrimSpace(r.Content))
		require.LessOrEqual(t, len(r.Citations), provider.MaxCitations)
		for _, c := range r.Citations {
			require.True(t, strings.HasPrefix(strings.ToLower(c), "http"))
			require.LessOrEqual(t, len(c), provider.MaxCitationLength)
		}
	})
}
