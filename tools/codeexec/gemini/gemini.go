package gemini

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/toolq/toolq/tools/codeexec/internal/transport"
	"github.com/toolq/toolq/tools/codeexec/provider"
)

// Defaults.
const (
	DefaultBaseURL = "https://generativelanguage.googleapis.com"
	DefaultModel   = "gemini-2.5-flash"
	// EnvAPIKey is the environment variable holding the API key;
	// EnvAPIKeyAlt is read when it is unset.
	EnvAPIKey    = "GEMINI_API_KEY" //nolint:gosec // G101: the name of an environment variable, not a key
	EnvAPIKeyAlt = "GOOGLE_API_KEY" //nolint:gosec // G101: the name of an environment variable, not a key
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

// Client speaks the Gemini API's generateContent with the codeExecution tool.
type Client struct {
	base   string
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
		base:   base,
		caller: transport.Caller{Provider: provider.Gemini, HTTP: cfg.HTTPClient, Log: cfg.Logger, Now: cfg.Now},
	}
}

// Name returns "gemini".
func (c *Client) Name() string { return provider.Gemini }

// Execute runs req. Errors are *provider.Error.
func (c *Client) Execute(ctx context.Context, req *provider.Request) (*provider.Response, error) {
	model := NormalizeModel(req.Model)
	h := http.Header{}
	h.Set("x-goog-api-key", req.APIKey)
	u := transport.JoinURL(c.base, "/v1beta/models/"+url.PathEscape(model)+":generateContent")
	data, err := c.caller.PostJSON(ctx, u, h, BuildBody(req.Task), req.APIKey)
	if err != nil {
		return nil, err
	}
	return Parse(data, model)
}

// Body is a generateContent request body.
type Body struct {
	Contents []Content `json:"contents"`
	Tools    []Tool    `json:"tools"`
}

// Content is one turn.
type Content struct {
	Role  string `json:"role"`
	Parts []Part `json:"parts"`
}

// Part is a text part of a request.
type Part struct {
	Text string `json:"text"`
}

// Tool enables code execution; it takes no parameters.
type Tool struct {
	CodeExecution struct{} `json:"codeExecution"`
}

// BuildBody returns the request: the task as one user turn and the
// codeExecution tool.
func BuildBody(task string) *Body {
	return &Body{
		Contents: []Content{{Role: "user", Parts: []Part{{Text: task}}}},
		Tools:    []Tool{{}},
	}
}

// NormalizeModel trims a model id, drops a "models/" or "google/" prefix and
// falls back to DefaultModel when nothing is left.
func NormalizeModel(id string) string {
	id = strings.TrimSpace(id)
	id = strings.TrimPrefix(id, "google/")
	id = strings.TrimPrefix(id, "models/")
	if id == "" {
		return DefaultModel
	}
	return id
}

type response struct {
	Candidates     []candidate `json:"candidates"`
	UsageMetadata  *usage      `json:"usageMetadata"`
	ModelVersion   string      `json:"modelVersion"`
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
}

type candidate struct {
	Content *struct {
		Parts []part `json:"parts"`
	} `json:"content"`
	FinishReason     string `json:"finishReason"`
	CitationMetadata *struct {
		CitationSources []struct {
			URI string `json:"uri"`
		} `json:"citationSources"`
	} `json:"citationMetadata"`
	GroundingMetadata *struct {
		GroundingChunks []struct {
			Web *struct {
				URI string `json:"uri"`
			} `json:"web"`
		} `json:"groundingChunks"`
	} `json:"groundingMetadata"`
}

type part struct {
	Text           *string `json:"text"`
	Thought        bool    `json:"thought"`
	ExecutableCode *struct {
		Language string `json:"language"`
		Code     string `json:"code"`
	} `json:"executableCode"`
	CodeExecutionResult *struct {
		Outcome string `json:"outcome"`
		Output  string `json:"output"`
	} `json:"codeExecutionResult"`
	InlineData *struct {
		MIMEType string `json:"mimeType"`
		Data     string `json:"data"`
	} `json:"inlineData"`
}

type usage struct {
	PromptTokenCount        int64 `json:"promptTokenCount"`
	CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
	ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
	ToolUsePromptTokenCount int64 `json:"toolUsePromptTokenCount"`
}

// Outcome maps a Gemini outcome enum onto the normalized outcomes.
func Outcome(s string) string {
	switch s {
	case "OUTCOME_OK":
		return provider.OutcomeOK
	case "OUTCOME_FAILED":
		return provider.OutcomeFailed
	case "OUTCOME_DEADLINE_EXCEEDED":
		return provider.OutcomeDeadlineExceeded
	}
	return provider.OutcomeUnspecified
}

// Parse parses a generateContent body: the first candidate's parts in order,
// text joined (thought parts left out), each executableCode a run that the
// following codeExecutionResult completes, inline images kept with the run
// they follow. Errors are *provider.Error.
func Parse(data []byte, model string) (*provider.Response, error) {
	var r response
	if err := transport.Decode(provider.Gemini, data, &r); err != nil {
		return nil, err
	}
	out := &provider.Response{Model: r.ModelVersion}
	if out.Model == "" {
		out.Model = model
	}
	var text provider.Text
	var cites provider.Citations
	var types provider.Types
	open := -1 // index of the run waiting for its result
	if len(r.Candidates) > 0 {
		c := r.Candidates[0]
		if c.Content != nil {
			for _, p := range c.Content.Parts {
				switch {
				case p.ExecutableCode != nil:
					text.Break()
					types.Add("executableCode")
					out.UsedCodeExecution = true
					out.Runs = append(out.Runs, provider.Run{
						Code:     p.ExecutableCode.Code,
						Language: language(p.ExecutableCode.Language),
						Outcome:  provider.OutcomeUnspecified,
					})
					open = len(out.Runs) - 1
				case p.CodeExecutionResult != nil:
					text.Break()
					types.Add("codeExecutionResult")
					out.UsedCodeExecution = true
					if open < 0 {
						out.Runs = append(out.Runs, provider.Run{Language: "python"})
						open = len(out.Runs) - 1
					}
					out.Runs[open].Outcome = Outcome(p.CodeExecutionResult.Outcome)
					out.Runs[open].Output = p.CodeExecutionResult.Output
				case p.InlineData != nil:
					types.Add("inlineData")
					img := provider.Image{MIMEType: p.InlineData.MIMEType, Data: p.InlineData.Data}
					if n := len(out.Runs); n > 0 {
						out.Runs[n-1].Images = append(out.Runs[n-1].Images, img)
					} else {
						out.Images = append(out.Images, img)
					}
				case p.Text != nil:
					if p.Thought {
						types.Add("thought")
						continue
					}
					types.Add("text")
					text.Write(*p.Text)
				}
			}
		}
		if c.CitationMetadata != nil {
			for _, s := range c.CitationMetadata.CitationSources {
				cites.Add(s.URI)
			}
		}
		if c.GroundingMetadata != nil {
			for _, g := range c.GroundingMetadata.GroundingChunks {
				if g.Web != nil {
					cites.Add(g.Web.URI)
				}
			}
		}
	}
	out.Content = text.String()
	out.Citations = cites.List()
	out.OutputTypes = types.List()
	for _, run := range out.Runs {
		if run.Code != "" {
			out.Usage.ToolCalls++
		}
	}
	if u := r.UsageMetadata; u != nil {
		out.Usage.InputTokens = u.PromptTokenCount + u.ToolUsePromptTokenCount
		out.Usage.OutputTokens = u.CandidatesTokenCount + u.ThoughtsTokenCount
		out.Usage.ReasoningTokens = u.ThoughtsTokenCount
	}
	if strings.TrimSpace(out.Content) == "" {
		return nil, provider.NoAnswer(provider.Gemini)
	}
	return out, nil
}

func language(s string) string {
	if s == "" || s == "LANGUAGE_UNSPECIFIED" {
		return "python"
	}
	return strings.ToLower(s)
}
