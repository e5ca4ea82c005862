package contracts

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"unicode/utf8"
)

// Providers of the code_execution tool, in the default failover order.
const (
	ProviderXAI       = "xai"
	ProviderOpenAI    = "openai"
	ProviderGemini    = "gemini"
	ProviderAnthropic = "anthropic"
)

var codeExecutionProviders = []string{ProviderXAI, ProviderOpenAI, ProviderGemini, ProviderAnthropic}

// CodeExecutionProviders lists every provider of code_execution in the
// default failover order. The caller gets its own copy.
func CodeExecutionProviders() []string { return append([]string(nil), codeExecutionProviders...) }

// KnownProvider reports whether name is a provider of code_execution.
func KnownProvider(name string) bool {
	for _, n := range codeExecutionProviders {
		if n == name {
			return true
		}
	}
	return false
}

// Limits of a code_execution input.
const (
	// CodeExecutionMaxTaskBytes bounds the task (the data travels inline).
	CodeExecutionMaxTaskBytes = 256 << 10
	// CodeExecutionMaxModelLength bounds a model id.
	CodeExecutionMaxModelLength = 128
	// CodeExecutionMaxTurns is the largest maxTurns a job may ask for.
	CodeExecutionMaxTurns = 64
	// CodeExecutionMaxTimeoutSeconds is the largest per-attempt
	// timeoutSeconds a job may ask for.
	CodeExecutionMaxTimeoutSeconds = 600
)

// CodeExecutionInput is the input of a code_execution job.
type CodeExecutionInput struct {
	// Task is the full analysis request with its data inline.
	Task string `json:"task"`
	// Provider picks the provider; the worker's default when empty.
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

// DecodeCodeExecutionInput parses and validates a job's input strictly
// (unknown fields are refused). Every failure is an *Error with code
// invalid_input; it never panics.
func DecodeCodeExecutionInput(raw json.RawMessage) (*CodeExecutionInput, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, Errorf(CodeInvalidInput, "code_execution input must be a JSON object with a task")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var in CodeExecutionInput
	if err := dec.Decode(&in); err != nil {
		return nil, Errorf(CodeInvalidInput, "malformed code_execution input: %s", clip(err.Error(), 200))
	}
	if dec.More() {
		return nil, Errorf(CodeInvalidInput, "trailing data after the code_execution input")
	}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	return &in, nil
}

// Validate checks every field. Its errors are *Error with code
// invalid_input.
func (in *CodeExecutionInput) Validate() error {
	known := strings.Join(codeExecutionProviders, ", ")
	if strings.TrimSpace(in.Task) == "" {
		return Errorf(CodeInvalidInput, "task is required: the full analysis request with its data inline")
	}
	if len(in.Task) > CodeExecutionMaxTaskBytes {
		return Errorf(CodeInvalidInput, "task is %d bytes, at most %d allowed", len(in.Task), CodeExecutionMaxTaskBytes)
	}
	if !utf8.ValidString(in.Task) {
		return Errorf(CodeInvalidInput, "task is not valid UTF-8")
	}
	if in.Provider != "" && !KnownProvider(in.Provider) {
		return Errorf(CodeInvalidInput, "unknown provider %q (known: %s)", clip(in.Provider, 64), known)
	}
	if in.Model != "" && !ValidModelID(in.Model) {
		return Errorf(CodeInvalidInput, "model %q is not a valid model id", clip(in.Model, 64))
	}
	if in.MaxTurns != nil && (*in.MaxTurns < 1 || *in.MaxTurns > CodeExecutionMaxTurns) {
		return Errorf(CodeInvalidInput, "maxTurns %d out of range [1, %d]", *in.MaxTurns, CodeExecutionMaxTurns)
	}
	if t := in.TimeoutSeconds; t != nil && (math.IsNaN(*t) || *t <= 0 || *t > CodeExecutionMaxTimeoutSeconds) {
		return Errorf(CodeInvalidInput, "timeoutSeconds out of range (0, %d]", CodeExecutionMaxTimeoutSeconds)
	}
	if len(in.Failover) > len(codeExecutionProviders) {
		return Errorf(CodeInvalidInput, "failover lists %d providers, at most %d", len(in.Failover), len(codeExecutionProviders))
	}
	for _, p := range in.Failover {
		if !KnownProvider(p) {
			return Errorf(CodeInvalidInput, "unknown failover provider %q (known: %s)", clip(p, 64), known)
		}
	}
	return nil
}

// ValidModelID accepts model ids of letters, digits and . _ - : / @, at
// most CodeExecutionMaxModelLength bytes, without "..".
func ValidModelID(s string) bool {
	if s == "" || len(s) > CodeExecutionMaxModelLength {
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

// CodeExecutionDetails is the result of a code_execution job (the
// code_execution contract's details plus runs, usage, attempts and the
// failover trail).
type CodeExecutionDetails struct {
	Task              string               `json:"task"`
	Provider          string               `json:"provider"`
	Model             string               `json:"model"`
	TookMs            int64                `json:"tookMs"`
	Content           string               `json:"content"`
	Citations         []string             `json:"citations"`
	UsedCodeExecution bool                 `json:"usedCodeExecution"`
	OutputTypes       []string             `json:"outputTypes"`
	Runs              []CodeExecutionRun   `json:"runs"`
	Images            []CodeExecutionImage `json:"images,omitempty"`
	Usage             CodeExecutionUsage   `json:"usage"`
	// Attempts counts the HTTP attempts made to the provider that answered.
	Attempts int `json:"attempts"`
	// Failover lists the providers tried before the one that answered.
	Failover []CodeExecutionFailoverStep `json:"failover,omitempty"`
	// Truncated reports that content, run output or images were clipped to
	// fit a result message.
	Truncated bool `json:"truncated,omitempty"`
}

// CodeExecutionRun is one executed code block of a result.
type CodeExecutionRun struct {
	Code     string               `json:"code"`
	Language string               `json:"language"`
	Outcome  string               `json:"outcome"`
	Output   string               `json:"output"`
	Images   []CodeExecutionImage `json:"images,omitempty"`
}

// CodeExecutionImage is an image the code produced: inline data, a URL or a
// provider file id.
type CodeExecutionImage struct {
	MIMEType string `json:"mimeType,omitempty"`
	Data     string `json:"data,omitempty"` // base64
	URL      string `json:"url,omitempty"`
	FileID   string `json:"fileId,omitempty"`
	// Omitted reports that Data was dropped to keep the result small.
	Omitted bool `json:"omitted,omitempty"`
}

// CodeExecutionUsage is the token and tool accounting of a result.
type CodeExecutionUsage struct {
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

// CodeExecutionFailoverStep records one provider a job tried before the one
// that answered (or before giving up).
type CodeExecutionFailoverStep struct {
	Provider string `json:"provider"`
	Model    string `json:"model,omitempty"`
	Code     string `json:"code"`
	Kind     string `json:"kind,omitempty"`
	Message  string `json:"message"`
}

// CodeExecutionFailure is the Details of a failed code_execution job's
// error, for every code but missing_credentials.
type CodeExecutionFailure struct {
	Provider string `json:"provider"`
	Model    string `json:"model,omitempty"`
	// Kind is the failure class: auth, bad_request, rate_limited, server,
	// transport, malformed, no_answer, breaker_open, …
	Kind         string                      `json:"kind"`
	Status       int                         `json:"status,omitempty"`
	RetryAfterMs int64                       `json:"retryAfterMs,omitempty"`
	Attempts     int                         `json:"attempts,omitempty"`
	Failover     []CodeExecutionFailoverStep `json:"failover,omitempty"`
}

// CodeExecutionMissingCredentials is the Details of a code_execution job's
// missing_credentials error.
type CodeExecutionMissingCredentials struct {
	// Error is missing_<provider>_api_key.
	Error   string `json:"error"`
	Message string `json:"message"`
	Docs    string `json:"docs"`
}
