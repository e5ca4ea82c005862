package xai

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/toolq/toolq/tools/codeexec/internal/responses"
	"github.com/toolq/toolq/tools/codeexec/internal/transport"
	"github.com/toolq/toolq/tools/codeexec/provider"
)

// Defaults of the code_execution contract.
const (
	DefaultBaseURL = "https://api.x.ai"
	DefaultModel   = "grok-4.6"
	// EnvAPIKey is the environment variable holding the API key.
	EnvAPIKey = "XAI_API_KEY" //nolint:gosec // G101: the name of an environment variable, not a key
	// ToolCallUSD is xAI's published price of one code_interpreter call
	// ($5 per 1,000 calls), charged on top of tokens.
	ToolCallUSD = 0.005
)

// Config configures a Client.
type Config struct {
	// BaseURL is the API root; DefaultBaseURL when empty.
	BaseURL string
	// HTTPClient sends the requests; http.DefaultClient when nil.
	HTTPClient *http.Client
	// Logger receives request and response bodies at debug level, secrets
	// redacted; nothing is logged when nil.
	Logger *slog.Logger
	// Now is the clock for Retry-After dates; time.Now when nil.
	Now func() time.Time
}

// Client speaks xAI's Responses API with the code_interpreter tool.
type Client struct {
	url    string
	caller transport.Caller
}

// New returns a Client.
func New(cfg *Config) *Client {
	if cfg == nil {
		cfg = &Config{}
	}
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	return &Client{
		url:    transport.JoinURL(base, responses.Path),
		caller: transport.Caller{Provider: provider.XAI, HTTP: cfg.HTTPClient, Log: cfg.Logger, Now: cfg.Now},
	}
}

// Name returns "xai".
func (c *Client) Name() string { return provider.XAI }

// Execute runs req. Errors are *provider.Error.
func (c *Client) Execute(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	model := NormalizeModel(req.Model)
	h := http.Header{}
	h.Set("Authorization", "Bearer "+req.APIKey)
	data, err := c.caller.PostJSON(ctx, c.url, h, BuildBody(req.Task, model, req.MaxTurns), req.APIKey)
	if err != nil {
		return nil, err
	}
	return Parse(data, model)
}

// BuildBody returns the request body of the code_execution contract: the task as one user
// message, the code_interpreter tool, store false, reasoning effort "low"
// only for grok-4.3 and grok-4.6, max_turns only when positive, and the
// interpreter's outputs included.
func BuildBody(task, model string, maxTurns int) *responses.Body {
	b := &responses.Body{
		Model:   model,
		Input:   []responses.InputMessage{{Role: "user", Content: task}},
		Tools:   []any{map[string]string{"type": "code_interpreter"}},
		Store:   false,
		Include: []string{responses.IncludeOutputs},
	}
	if effort := DefaultReasoningEffort(model); effort != "" {
		b.Reasoning = &responses.Reasoning{Effort: effort}
	}
	if maxTurns > 0 {
		b.MaxTurns = maxTurns
	}
	return b
}

// DefaultReasoningEffort is "low" for grok-4.3 and grok-4.6 and "" (field
// omitted) for every other model.
func DefaultReasoningEffort(model string) string {
	switch NormalizeModel(model) {
	case "grok-4.3", "grok-4.6":
		return "low"
	}
	return ""
}

var aliases = map[string]string{
	"grok-4.3-latest":         "grok-4.3",
	"grok-4.5-latest":         "grok-4.5",
	"grok-4.6-latest":         "grok-4.6",
	"grok-build-latest":       "grok-4.5",
	"grok-code-fast-1":        "grok-build-0.1",
	"grok-code-fast":          "grok-build-0.1",
	"grok-code-fast-1-0825":   "grok-build-0.1",
	"grok-4-fast-reasoning":   "grok-4-fast",
	"grok-4-1-fast-reasoning": "grok-4-1-fast",
}

// NormalizeModel trims and lower-cases a model id, drops an "xai/" prefix,
// resolves the known aliases, and falls back to DefaultModel when nothing
// is left.
func NormalizeModel(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	id = strings.TrimPrefix(id, "xai/")
	if a, ok := aliases[id]; ok {
		return a
	}
	if id == "" {
		return DefaultModel
	}
	return id
}

// Parse parses an xAI Responses body. Errors are *provider.Error.
func Parse(data []byte, model string) (*provider.Response, error) {
	return responses.Parse(provider.XAI, data, model)
}
