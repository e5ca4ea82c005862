package openai

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

// Defaults.
const (
	DefaultBaseURL = "https://api.openai.com"
	DefaultModel   = "gpt-4.1"
	// EnvAPIKey is the environment variable holding the API key.
	EnvAPIKey = "OPENAI_API_KEY" //nolint:gosec // G101: the name of an environment variable, not a key
)

// Config configures a Client.
type Config struct {
	// BaseURL is the API root; DefaultBaseURL when empty.
	BaseURL string
	// HTTPClient sends the requests; http.DefaultClient when nil.
	HTTPClient *http.Client
	// Logger receives bodies at debug level, secrets redacted.
	Logger *slog.Logger
	// Now is the clock for Retry-After dates; time.Now when nil.
	Now func() time.Time
}

// Client speaks OpenAI's Responses API with the code_interpreter tool.
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
		caller: transport.Caller{Provider: provider.OpenAI, HTTP: cfg.HTTPClient, Log: cfg.Logger, Now: cfg.Now},
	}
}

// Name returns "openai".
func (c *Client) Name() string { return provider.OpenAI }

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

// CodeInterpreter is the tool definition with an automatically provisioned
// container.
type CodeInterpreter struct {
	Type      string    `json:"type"`
	Container Container `json:"container"`
}

// Container selects the sandbox container.
type Container struct {
	Type string `json:"type"`
}

// BuildBody returns the request body: the task as one user message, the
// code_interpreter tool with an auto container, store false, the
// interpreter's outputs included, and max_tool_calls when maxTurns > 0.
func BuildBody(task, model string, maxTurns int) *responses.Body {
	b := &responses.Body{
		Model:   model,
		Input:   []responses.InputMessage{{Role: "user", Content: task}},
		Tools:   []any{CodeInterpreter{Type: "code_interpreter", Container: Container{Type: "auto"}}},
		Store:   false,
		Include: []string{responses.IncludeOutputs},
	}
	if maxTurns > 0 {
		b.MaxToolCalls = maxTurns
	}
	return b
}

// NormalizeModel trims a model id, drops an "openai/" prefix and falls back
// to DefaultModel when nothing is left.
func NormalizeModel(id string) string {
	id = strings.TrimPrefix(strings.TrimSpace(id), "openai/")
	if id == "" {
		return DefaultModel
	}
	return id
}

// Parse parses an OpenAI Responses body. Errors are *provider.Error.
func Parse(data []byte, model string) (*provider.Response, error) {
	return responses.Parse(provider.OpenAI, data, model)
}
