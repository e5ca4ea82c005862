package anthropic

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/toolq/toolq/tools/codeexec/internal/transport"
	"github.com/toolq/toolq/tools/codeexec/provider"
)

// Defaults and protocol constants.
const (
	DefaultBaseURL = "https://api.anthropic.com"
	DefaultModel   = "claude-sonnet-4-5"
	// EnvAPIKey is the environment variable holding the API key.
	EnvAPIKey = "ANTHROPIC_API_KEY" //nolint:gosec // G101: the name of an environment variable, not a key
	// Version is the anthropic-version header.
	Version = "2023-06-01"
	// Beta is the anthropic-beta header enabling the tool.
	Beta = "code-execution-2025-08-25"
	// ToolType is the server tool's versioned type.
	ToolType = "code_execution_20250825"
	// DefaultMaxTokens bounds the answer.
	DefaultMaxTokens = 4096
	// DefaultContinuations is how many times a pause_turn is continued when
	// no turn limit is set.
	DefaultContinuations = 3
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

// Client speaks the Messages API with the server-side code execution tool.
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
		url:    transport.JoinURL(base, "/v1/messages"),
		caller: transport.Caller{Provider: provider.Anthropic, HTTP: cfg.HTTPClient, Log: cfg.Logger, Now: cfg.Now},
	}
}

// Name returns "anthropic".
func (c *Client) Name() string { return provider.Anthropic }

// Message is one turn of a request.
type Message struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

// Tool is the code execution tool definition.
type Tool struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// Body is a Messages request body.
type Body struct {
	Model     string    `json:"model"`
	MaxTokens int       `json:"max_tokens"`
	Messages  []Message `json:"messages"`
	Tools     []Tool    `json:"tools"`
	Container string    `json:"container,omitempty"`
}

// BuildBody returns the first request: the task as one user message and the
// code_execution tool.
func BuildBody(task, model string) *Body {
	return &Body{
		Model:     model,
		MaxTokens: DefaultMaxTokens,
		Messages:  []Message{{Role: "user", Content: task}},
		Tools:     []Tool{{Type: ToolType, Name: "code_execution"}},
	}
}

// Execute runs req. A pause_turn stop is continued (the content sent back
// as the assistant turn, in the same container) up to req.MaxTurns times,
// DefaultContinuations when unset. Errors are *provider.Error.
func (c *Client) Execute(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	model := NormalizeModel(req.Model)
	h := http.Header{}
	h.Set("x-api-key", req.APIKey)
	h.Set("anthropic-version", Version)
	h.Set("anthropic-beta", Beta)
	body := BuildBody(req.Task, model)
	limit := req.MaxTurns
	if limit <= 0 {
		limit = DefaultContinuations
	}
	var acc accumulated
	for turn := 0; ; turn++ {
		data, err := c.caller.PostJSON(ctx, c.url, h, body, req.APIKey)
		if err != nil {
			return nil, err
		}
		m, err := decode(data)
		if err != nil {
			return nil, err
		}
		acc.add(m)
		if m.StopReason != "pause_turn" || turn >= limit {
			break
		}
		body.Messages = []Message{
			{Role: "user", Content: req.Task},
			{Role: "assistant", Content: acc.content},
		}
		if m.Container != nil && m.Container.ID != "" {
			body.Container = m.Container.ID
		}
	}
	return acc.response(model)
}

// NormalizeModel trims a model id, drops an "anthropic/" prefix and falls
// back to DefaultModel when nothing is left.
func NormalizeModel(id string) string {
	id = strings.TrimPrefix(strings.TrimSpace(id), "anthropic/")
	if id == "" {
		return DefaultModel
	}
	return id
}

type message struct {
	Model      string            `json:"model"`
	Content    []json.RawMessage `json:"content"`
	StopReason string            `json:"stop_reason"`
	Container  *struct {
		ID string `json:"id"`
	} `json:"container"`
	Usage *struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
}

type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	Citations []struct {
		URL string `json:"url"`
	} `json:"citations"`
}

type toolInput struct {
	Command  string `json:"command"`
	Code     string `json:"code"`
	Path     string `json:"path"`
	FileText string `json:"file_text"`
}

func decode(data []byte) (*message, error) {
	var m message
	if err := transport.Decode(provider.Anthropic, data, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

type accumulated struct {
	model   string
	content []json.RawMessage
	in, out int64
}

func (a *accumulated) add(m *message) {
	if m.Model != "" {
		a.model = m.Model
	}
	a.content = append(a.content, m.Content...)
	if m.Usage != nil {
		a.in += m.Usage.InputTokens
		a.out += m.Usage.OutputTokens
	}
}

// Parse parses one Messages response body. Errors are *provider.Error.
func Parse(data []byte, model string) (*provider.Response, error) {
	m, err := decode(data)
	if err != nil {
		return nil, err
	}
	var a accumulated
	a.add(m)
	return a.response(model)
}

func (a *accumulated) response(model string) (*provider.Response, error) {
	out := &provider.Response{Model: a.model}
	if out.Model == "" {
		out.Model = model
	}
	var text provider.Text
	var cites provider.Citations
	var types provider.Types
	runByID := map[string]int{}
	for _, raw := range a.content {
		var b block
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, provider.Malformed(provider.Anthropic, "malformed content block: %s", transport.Clip(err.Error(), 200))
		}
		types.Add(b.Type)
		switch b.Type {
		case "text":
			text.Write(b.Text)
			for _, c := range b.Citations {
				cites.Add(c.URL)
			}
		case "server_tool_use":
			text.Break()
			out.UsedCodeExecution = true
			out.Usage.ToolCalls++
			var in toolInput
			_ = json.Unmarshal(b.Input, &in) // an odd input leaves an empty run
			r := provider.Run{Outcome: provider.OutcomeUnspecified}
			switch {
			case b.Name == "bash_code_execution" || in.Command != "" && b.Name != "text_editor_code_execution":
				r.Language, r.Code = "bash", in.Command
			case b.Name == "text_editor_code_execution":
				r.Language = "text_editor"
				r.Code = strings.TrimSpace(in.Command + " " + in.Path)
				if in.FileText != "" {
					r.Code += "\n" + in.FileText
				}
			default:
				r.Language, r.Code = "python", in.Code
			}
			out.Runs = append(out.Runs, r)
			if b.ID != "" {
				runByID[b.ID] = len(out.Runs) - 1
			}
		case "bash_code_execution_tool_result", "code_execution_tool_result", "text_editor_code_execution_tool_result":
			text.Break()
			out.UsedCodeExecution = true
			i, ok := runByID[b.ToolUseID]
			if !ok {
				out.Runs = append(out.Runs, provider.Run{Language: "python", Outcome: provider.OutcomeUnspecified})
				i = len(out.Runs) - 1
			}
			fillResult(&out.Runs[i], b.Content)
		}
	}
	out.Content = text.String()
	out.Citations = cites.List()
	out.OutputTypes = types.List()
	out.Usage.InputTokens = a.in
	out.Usage.OutputTokens = a.out
	if strings.TrimSpace(out.Content) == "" {
		return nil, provider.NoAnswer(provider.Anthropic)
	}
	return out, nil
}

func fillResult(r *provider.Run, raw json.RawMessage) {
	var res struct {
		Type       string          `json:"type"`
		Stdout     string          `json:"stdout"`
		Stderr     string          `json:"stderr"`
		ReturnCode *int            `json:"return_code"`
		ErrorCode  string          `json:"error_code"`
		Content    json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &res) != nil {
		return
	}
	if res.ErrorCode != "" || strings.HasSuffix(res.Type, "_error") {
		r.Output = res.ErrorCode
		if res.ErrorCode == "execution_time_exceeded" {
			r.Outcome = provider.OutcomeDeadlineExceeded
		} else {
			r.Outcome = provider.OutcomeFailed
		}
		return
	}
	r.Output = res.Stdout + res.Stderr
	switch {
	case res.ReturnCode != nil && *res.ReturnCode != 0:
		r.Outcome = provider.OutcomeFailed
	default:
		r.Outcome = provider.OutcomeOK
	}
	// Text-editor results carry the file content as a string; bash and
	// legacy results carry output files as a list of {file_id}.
	var s string
	var files []struct {
		FileID string `json:"file_id"`
	}
	switch {
	case json.Unmarshal(res.Content, &s) == nil:
		if r.Output == "" {
			r.Output = s
		}
	case json.Unmarshal(res.Content, &files) == nil:
		for _, f := range files {
			if f.FileID != "" {
				r.Images = append(r.Images, provider.Image{FileID: f.FileID})
			}
		}
	}
}
