package codeexec

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/codeexec/provider"
)

// ToolName is the tool this package implements.
const ToolName = contracts.ToolCodeExecution

// Input limits.
const (
	// MaxTaskBytes bounds the task (the data travels inline).
	MaxTaskBytes = 256 << 10
	// MaxModelLength bounds a model id.
	MaxModelLength = 128
	// MaxTurnsLimit is the largest maxTurns a job may ask for.
	MaxTurnsLimit = 64
	// MaxTimeoutSeconds is the largest per-attempt timeoutSeconds a job may
	// ask for.
	MaxTimeoutSeconds = 600
)

// Input is the argument of a code_execution job.
type Input struct {
	// Task is the full analysis request with its data inline.
	Task string `json:"task"`
	// Provider picks the provider; the configured default when empty.
	Provider string `json:"provider,omitempty"`
	// Model overrides the provider's configured model (first provider only).
	Model string `json:"model,omitempty"`
	// MaxTurns caps the provider's internal tool turns.
	MaxTurns *int `json:"maxTurns,omitempty"`
	// TimeoutSeconds bounds one HTTP attempt; the provider's configured
	// timeout when unset. The job's deadline bounds everything.
	TimeoutSeconds *float64 `json:"timeoutSeconds,omitempty"`
	// Failover lists the providers to try, in order, when Provider is
	// unavailable (breaker open, outage, bad credentials).
	Failover []string `json:"failover,omitempty"`
}

// DecodeInput parses and validates a job's input. Every failure is a
// *contracts.Error with code invalid_input; it never panics.
func DecodeInput(raw json.RawMessage) (*Input, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "code_execution input must be a JSON object with a task")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var in Input
	if err := dec.Decode(&in); err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "malformed code_execution input: %s", clipString(err.Error(), 200))
	}
	if dec.More() {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "trailing data after the code_execution input")
	}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	return &in, nil
}

// Validate checks every field.
func (in *Input) Validate() error {
	if strings.TrimSpace(in.Task) == "" {
		return contracts.Errorf(contracts.CodeInvalidInput, "task is required: the full analysis request with its data inline")
	}
	if len(in.Task) > MaxTaskBytes {
		return contracts.Errorf(contracts.CodeInvalidInput, "task is %d bytes, at most %d allowed", len(in.Task), MaxTaskBytes)
	}
	if !utf8.ValidString(in.Task) {
		return contracts.Errorf(contracts.CodeInvalidInput, "task is not valid UTF-8")
	}
	if in.Provider != "" && !provider.Known(in.Provider) {
		return contracts.Errorf(contracts.CodeInvalidInput, "unknown provider %q (known: %s)", clipString(in.Provider, 64), strings.Join(provider.Names, ", "))
	}
	if in.Model != "" && !validModel(in.Model) {
		return contracts.Errorf(contracts.CodeInvalidInput, "model %q is not a valid model id", clipString(in.Model, 64))
	}
	if in.MaxTurns != nil && (*in.MaxTurns < 1 || *in.MaxTurns > MaxTurnsLimit) {
		return contracts.Errorf(contracts.CodeInvalidInput, "maxTurns %d out of range [1, %d]", *in.MaxTurns, MaxTurnsLimit)
	}
	if t := in.TimeoutSeconds; t != nil && (math.IsNaN(*t) || *t <= 0 || *t > MaxTimeoutSeconds) {
		return contracts.Errorf(contracts.CodeInvalidInput, "timeoutSeconds out of range (0, %d]", MaxTimeoutSeconds)
	}
	if len(in.Failover) > len(provider.Names) {
		return contracts.Errorf(contracts.CodeInvalidInput, "failover lists %d providers, at most %d", len(in.Failover), len(provider.Names))
	}
	for _, p := range in.Failover {
		if !provider.Known(p) {
			return contracts.Errorf(contracts.CodeInvalidInput, "unknown failover provider %q (known: %s)", clipString(p, 64), strings.Join(provider.Names, ", "))
		}
	}
	return nil
}

// validModel accepts model ids of letters, digits and . _ - : / @, at most
// MaxModelLength bytes.
func validModel(s string) bool {
	if s == "" || len(s) > MaxModelLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.' || c == '_' || c == '-' || c == ':' || c == '/' || c == '@':
		default:
			return false
		}
	}
	return !strings.Contains(s, "..")
}

// Run is one executed code block of a result.
type Run = provider.Run

// Image is an image the code produced.
type Image = provider.Image

// Details is the result of a code_execution job (the code_execution contract's details plus
// runs, usage, attempts and the failover trail).
type Details struct {
	Task              string   `json:"task"`
	Provider          string   `json:"provider"`
	Model             string   `json:"model"`
	TookMs            int64    `json:"tookMs"`
	Content           string   `json:"content"`
	Citations         []string `json:"citations"`
	UsedCodeExecution bool     `json:"usedCodeExecution"`
	OutputTypes       []string `json:"outputTypes"`
	Runs              []Run    `json:"runs"`
	Images            []Image  `json:"images,omitempty"`
	Usage             Usage    `json:"usage"`
	// Attempts counts the HTTP attempts made to the provider that answered.
	Attempts int `json:"attempts"`
	// Failover lists the providers tried before the one that answered.
	Failover []FailoverStep `json:"failover,omitempty"`
	// Truncated reports that content, run output or images were clipped to
	// fit a result message.
	Truncated bool `json:"truncated,omitempty"`
}

// Usage is the token and tool accounting of a result.
type Usage struct {
	InputTokens     int64 `json:"inputTokens"`
	OutputTokens    int64 `json:"outputTokens"`
	ReasoningTokens int64 `json:"reasoningTokens,omitempty"`
	ToolCalls       int64 `json:"toolCalls"`
	// CostUSD is the provider-reported cost, or an estimate from published
	// or configured prices; absent when nothing is known.
	CostUSD *float64 `json:"costUsd,omitempty"`
	// CostSource is "provider" or "estimate".
	CostSource string `json:"costSource,omitempty"`
}

// Result size limits, so a result fits a bus message.
const (
	MaxContentBytes   = 64 << 10
	MaxRunOutputBytes = 16 << 10
	MaxRunCodeBytes   = 32 << 10
	// MaxImageBytes bounds the inline data of the images of one result;
	// images past it keep their type but lose their data.
	MaxImageBytes = 512 << 10
)

// estimateCost prices usage: the provider's own figure when it reports one,
// else the configured or published prices, else nothing.
func estimateCost(u provider.Usage, p Pricing) (*float64, string) {
	if u.CostUSD != nil {
		c := *u.CostUSD
		return &c, "provider"
	}
	if p == (Pricing{}) {
		return nil, ""
	}
	c := float64(u.InputTokens)*p.InputPerMTokUSD/1e6 +
		float64(u.OutputTokens)*p.OutputPerMTokUSD/1e6 +
		float64(u.ToolCalls)*p.PerToolCallUSD
	c = math.Round(c*1e8) / 1e8
	return &c, "estimate"
}
