package gemini_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/tools/codeexec/gemini"
	"github.com/toolq/toolq/tools/codeexec/internal/providertest"
	"github.com/toolq/toolq/tools/codeexec/provider"
)

// answer is a recorded-shape generateContent body for s: the parts in the
// order they happened.
func answer(s providertest.Scenario) []byte {
	parts := []any{
		map[string]any{"text": "Let me think.", "thought": true},
		map[string]any{"executableCode": map[string]any{"language": "PYTHON", "code": s.Code}},
		map[string]any{"codeExecutionResult": map[string]any{"outcome": "OUTCOME_OK", "output": s.Output}},
	}
	for _, text := range s.Texts {
		parts = append(parts, map[string]any{"text": text})
	}
	var sources []any
	for _, c := range s.Citations {
		sources = append(sources, map[string]any{"startIndex": 0, "endIndex": 3, "uri": c})
	}
	body := map[string]any{
		"candidates": []any{map[string]any{
			"content":          map[string]any{"role": "model", "parts": parts},
			"finishReason":     "STOP",
			"citationMetadata": map[string]any{"citationSources": sources},
		}},
		"usageMetadata": map[string]any{
			"promptTokenCount": s.InputTokens - 20, "toolUsePromptTokenCount": 20,
			"candidatesTokenCount": s.OutputTokens - 5, "thoughtsTokenCount": 5, "totalTokenCount": s.InputTokens + s.OutputTokens,
		},
		"modelVersion": "gemini-2.5-flash",
		"responseId":   "abc",
	}
	b, _ := json.Marshal(body)
	return b
}

func errorBody(status int, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": status, "message": msg, "status": "INVALID_ARGUMENT"}})
	return b
}

const noText = `{"candidates":[{"content":{"role":"model","parts":[{"executableCode":{"language":"PYTHON","code":"x = 1"}},{"codeExecutionResult":{"outcome":"OUTCOME_OK","output":""}}]},"finishReason":"STOP"}]}`

func TestSuite(t *testing.T) {
	t.Parallel()
	providertest.Run(t, providertest.Harness{
		Name: provider.Gemini,
		New: func(base string, hc *http.Client, log *slog.Logger) provider.Client {
			return gemini.New(&gemini.Config{BaseURL: base, HTTPClient: hc, Logger: log})
		},
		Path:      func(model string) string { return "/v1beta/models/" + model + ":generateContent" },
		APIKey:    func(r *http.Request) string { return r.Header.Get("x-goog-api-key") },
		Answer:    answer,
		NoText:    []byte(noText),
		ErrorBody: errorBody,
		Model:     "gemini-2.5-flash",
	})
}

func TestRequestBody(t *testing.T) {
	t.Parallel()
	srv := providertest.NewServer(t, providertest.JSON(200, answer(providertest.Canonical)))
	c := gemini.New(&gemini.Config{BaseURL: srv.URL})
	_, err := c.Execute(context.Background(), &provider.Request{Task: "sum the first 50 primes", Model: "models/gemini-2.5-pro", MaxTurns: 2, APIKey: "AIzaTestKey"})
	require.NoError(t, err)
	req := srv.Requests()[0]
	require.Equal(t, "/v1beta/models/gemini-2.5-pro:generateContent", req.Path)
	require.Equal(t, "AIzaTestKey", req.Header.Get("x-goog-api-key"))
	require.JSONEq(t, `{
		"contents": [{"role": "user", "parts": [{"text": "sum the first 50 primes"}]}],
		"tools": [{"codeExecution": {}}]
	}`, string(req.Body))
}

// Seed 004: parts in order, several executableCode/codeExecutionResult
// pairs (the model debugging its script), every outcome mapped, images kept.
func TestParsePartsInOrder(t *testing.T) {
	t.Parallel()
	body := `{"candidates":[{"content":{"role":"model","parts":[
	 {"text":"I'll compute this directly."},
	 {"executableCode":{"language":"PYTHON","code":"print(1/0)"}},
	 {"codeExecutionResult":{"outcome":"OUTCOME_FAILED","output":"ZeroDivisionError"}},
	 {"executableCode":{"language":"PYTHON","code":"while True: pass"}},
	 {"codeExecutionResult":{"outcome":"OUTCOME_DEADLINE_EXCEEDED","output":""}},
	 {"executableCode":{"language":"PYTHON","code":"plot()"}},
	 {"codeExecutionResult":{"outcome":"OUTCOME_OK","output":"5117\n"}},
	 {"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}},
	 {"executableCode":{"language":"LANGUAGE_UNSPECIFIED","code":"x"}},
	 {"codeExecutionResult":{"outcome":"OUTCOME_UNSPECIFIED"}},
	 {"executableCode":{"language":"PYTHON","code":"y"}},
	 {"codeExecutionResult":{"outcome":"OUTCOME_SOMETHING_NEW"}},
	 {"text":" The sum of the first 50 primes is 5117."}]},
	 "groundingMetadata":{"groundingChunks":[{"web":{"uri":"https://primes.example/list"}}]}}],
	 "modelVersion":"gemini-2.5-flash-001"}`
	r, err := gemini.Parse([]byte(body), "gemini-2.5-flash")
	require.NoError(t, err)
	require.Equal(t, "I'll compute this directly. The sum of the first 50 primes is 5117.", r.Content)
	require.Equal(t, "gemini-2.5-flash-001", r.Model)
	require.Equal(t, []string{"text", "executableCode", "codeExecutionResult", "inlineData"}, r.OutputTypes)
	require.Equal(t, []string{"https://primes.example/list"}, r.Citations)
	got := make([]string, 0, len(r.Runs))
	for _, run := range r.Runs {
		got = append(got, run.Code+"="+run.Outcome)
	}
	require.Equal(t, []string{
		"print(1/0)=failed", "while True: pass=deadline_exceeded", "plot()=ok", "x=unspecified", "y=unspecified",
	}, got)
	require.Equal(t, "ZeroDivisionError", r.Runs[0].Output)
	require.Equal(t, "python", r.Runs[0].Language)
	require.Equal(t, []provider.Image{{MIMEType: "image/png", Data: "iVBORw0KGgo="}}, r.Runs[2].Images)
	require.Equal(t, int64(5), r.Usage.ToolCalls)
}

func TestOutcome(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"OUTCOME_OK":                provider.OutcomeOK,
		"OUTCOME_FAILED":            provider.OutcomeFailed,
		"OUTCOME_DEADLINE_EXCEEDED": provider.OutcomeDeadlineExceeded,
		"OUTCOME_UNSPECIFIED":       provider.OutcomeUnspecified,
		"":                          provider.OutcomeUnspecified,
	} {
		require.Equal(t, want, gemini.Outcome(in), in)
	}
}

func TestParseImageBeforeAnyRun(t *testing.T) {
	t.Parallel()
	r, err := gemini.Parse([]byte(`{"candidates":[{"content":{"parts":[{"inlineData":{"mimeType":"image/png","data":"AA=="}},{"text":"chart"}]}}]}`), "m")
	require.NoError(t, err)
	require.Equal(t, []provider.Image{{MIMEType: "image/png", Data: "AA=="}}, r.Images)
	require.False(t, r.UsedCodeExecution)
}

func TestParseBlockedPrompt(t *testing.T) {
	t.Parallel()
	_, err := gemini.Parse([]byte(`{"promptFeedback":{"blockReason":"SAFETY"}}`), "m")
	require.ErrorIs(t, err, provider.ErrNoAnswer)
}

func FuzzParse(f *testing.F) {
	f.Add(answer(providertest.Canonical))
	f.Add([]byte(noText))
	f.Add([]byte(`{"candidates":[{"content":{"parts":[{"codeExecutionResult":{"outcome":"OUTCOME_OK"}},{"text":"a"}]}}]}`))
	f.Add([]byte(`{"candidates":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := gemini.Parse(data, "gemini-2.5-flash")
		if err != nil {
			var pe *provider.Error
			require.ErrorAs(t, err, &pe)
			return
		}
		require.NotEmpty(t, strings.TrimSpace(r.Content))
		for _, run := range r.Runs {
			require.Contains(t, []string{provider.OutcomeOK, provider.OutcomeFailed, provider.OutcomeDeadlineExceeded, provider.OutcomeUnspecified}, run.Outcome)
		}
	})
}
