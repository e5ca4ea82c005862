package contracts_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

func TestCodeExecutionInputValidate(t *testing.T) {
	t.Parallel()
	in, err := contracts.DecodeCodeExecutionInput(json.RawMessage(` {"task":"mean of 1, 2","provider":"gemini","failover":["xai"],"model":"gemini-2.5-flash"} `))
	require.NoError(t, err)
	require.Equal(t, contracts.ProviderGemini, in.Provider)

	turns, nan := 0, math.NaN()
	for name, in := range map[string]contracts.CodeExecutionInput{
		"no task":          {},
		"blank task":       {Task: " \n"},
		"long task":        {Task: strings.Repeat("x", contracts.CodeExecutionMaxTaskBytes+1)},
		"not utf-8":        {Task: "\xff"},
		"unknown provider": {Task: "t", Provider: "acme"},
		"bad model":        {Task: "t", Model: "a..b"},
		"zero turns":       {Task: "t", MaxTurns: &turns},
		"nan timeout":      {Task: "t", TimeoutSeconds: &nan},
		"unknown failover": {Task: "t", Failover: []string{"acme"}},
		"long failover":    {Task: "t", Failover: []string{"xai", "xai", "xai", "xai", "xai"}},
	} {
		require.ErrorIs(t, in.Validate(), contracts.ErrInvalidInput, name)
	}
	for name, raw := range map[string]string{
		"array":         `[]`,
		"unknown field": `{"task":"t","temperature":1}`,
		"trailing":      `{"task":"t"} {"task":"u"}`,
	} {
		_, err := contracts.DecodeCodeExecutionInput(json.RawMessage(raw))
		require.ErrorIs(t, err, contracts.ErrInvalidInput, name)
	}

	got := contracts.CodeExecutionProviders()
	require.Equal(t, []string{"xai", "openai", "gemini", "anthropic"}, got)
	got[0] = "changed" // the caller's copy
	require.Equal(t, "xai", contracts.CodeExecutionProviders()[0])
}

func TestCodeExecutionWireNames(t *testing.T) {
	t.Parallel()
	cost := 0.25
	d := contracts.CodeExecutionDetails{
		Task: "t", Provider: "xai", Model: "m", TookMs: 5, Content: "c", Citations: []string{"https://x"},
		UsedCodeExecution: true, OutputTypes: []string{"text"},
		Runs:     []contracts.CodeExecutionRun{{Code: "1", Language: "python", Outcome: "ok", Output: "1", Images: []contracts.CodeExecutionImage{{MIMEType: "image/png", Data: "AA", Omitted: true}}}},
		Images:   []contracts.CodeExecutionImage{{URL: "https://i", FileID: "f"}},
		Usage:    contracts.CodeExecutionUsage{InputTokens: 1, OutputTokens: 2, ReasoningTokens: 3, ToolCalls: 4, CostUSD: &cost, CostSource: "provider"},
		Attempts: 2, Failover: []contracts.CodeExecutionFailoverStep{{Provider: "openai", Model: "m2", Code: "provider_unavailable", Kind: "server", Message: "503"}},
		Truncated: true,
	}
	b, err := json.Marshal(d)
	require.NoError(t, err)
	require.JSONEq(t, `{"task":"t","provider":"xai","model":"m","tookMs":5,"content":"c","citations":["https://x"],
		"usedCodeExecution":true,"outputTypes":["text"],
		"runs":[{"code":"1","language":"python","outcome":"ok","output":"1","images":[{"mimeType":"image/png","data":"AA","omitted":true}]}],
		"images":[{"url":"https://i","fileId":"f"}],
		"usage":{"inputTokens":1,"outputTokens":2,"reasoningTokens":3,"toolCalls":4,"costUsd":0.25,"costSource":"provider"},
		"attempts":2,"failover":[{"provider":"openai","model":"m2","code":"provider_unavailable","kind":"server","message":"503"}],
		"truncated":true}`, string(b))
}
