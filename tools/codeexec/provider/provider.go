package provider

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/toolq/toolq/contracts"
)

// Provider names.
const (
	XAI       = contracts.ProviderXAI
	OpenAI    = contracts.ProviderOpenAI
	Gemini    = contracts.ProviderGemini
	Anthropic = contracts.ProviderAnthropic
)

// Names lists every known provider in the default failover order.
var Names = contracts.CodeExecutionProviders()

// Known reports whether name is a known provider.
func Known(name string) bool { return contracts.KnownProvider(name) }

// Client runs one code-execution request against one provider's API. An
// implementation makes exactly one HTTP exchange per call (or a bounded chain
// of continuations the provider asks for); retries, breakers and failover are
// the caller's business.
type Client interface {
	// Name is the provider name, one of Names.
	Name() string
	// Execute sends req and parses the answer. Errors are *Error.
	Execute(ctx context.Context, req *Request) (*Response, error)
}

// Request is one code-execution request.
type Request struct {
	// Task is the analysis request with its data inline.
	Task string
	// Model is the provider's model id, already normalized.
	Model string
	// MaxTurns caps the provider's internal tool turns; 0 leaves it to the
	// provider.
	MaxTurns int
	// APIKey authenticates the request. It is never logged.
	APIKey string
}

// Outcomes of a run, normalized across providers.
const (
	OutcomeOK               = "ok"
	OutcomeFailed           = "failed"
	OutcomeDeadlineExceeded = "deadline_exceeded"
	OutcomeUnspecified      = "unspecified"
)

// Response is a provider's answer, normalized.
type Response struct {
	// Model is the model that answered, as the provider reports it (or the
	// requested one when it does not).
	Model string
	// Content is the answer text: the text blocks joined in order.
	Content string
	// Citations are http(s) URLs, deduplicated in order (see Citations).
	Citations []string
	// OutputTypes are the distinct output block types, in order of first
	// appearance.
	OutputTypes []string
	// UsedCodeExecution reports whether the provider ran code.
	UsedCodeExecution bool
	// Runs are the executed code blocks and what they printed, in order.
	Runs []Run
	// Images are images not tied to a run.
	Images []Image
	// Usage is what the provider reported about tokens and tool calls.
	Usage Usage
}

// Run is one executed code block.
type Run = contracts.CodeExecutionRun

// Image is an image the code produced: inline data, a URL or a provider
// file id.
type Image = contracts.CodeExecutionImage

// Usage is token and tool-call accounting.
type Usage struct {
	InputTokens int64 `json:"inputTokens"`
	// OutputTokens counts every generated token, reasoning included.
	OutputTokens int64 `json:"outputTokens"`
	// ReasoningTokens is the reasoning share of OutputTokens.
	ReasoningTokens int64 `json:"reasoningTokens,omitempty"`
	ToolCalls       int64 `json:"toolCalls"`
	// CostUSD is the cost the provider itself reported, if any (xAI reports
	// cost_in_usd_ticks).
	CostUSD *float64 `json:"-"`
}

// Citation limits of the code_execution contract.
const (
	MaxCitations         = 20
	MaxCitationLength    = 2048
	MaxAnnotationsToScan = 1000
)

// Citations collects citation URLs: http and https only, at most
// MaxCitationLength bytes, deduplicated in order, at most MaxCitations kept.
// Scanning stops after MaxAnnotationsToScan candidates.
type Citations struct {
	seen    map[string]bool
	list    []string
	scanned int
}

// Add offers one candidate URL.
func (c *Citations) Add(u string) {
	if c.scanned >= MaxAnnotationsToScan || len(c.list) >= MaxCitations {
		c.scanned++
		return
	}
	c.scanned++
	u = strings.TrimSpace(u)
	if u == "" || len(u) > MaxCitationLength || !utf8.ValidString(u) {
		return
	}
	lower := strings.ToLower(u)
	if !strings.HasPrefix(lower, "http://") && !strings.HasPrefix(lower, "https://") {
		return
	}
	if len(u) == len("https://") || strings.ContainsAny(u, " \t\r\n\"<>\\") {
		return
	}
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	if c.seen[u] {
		return
	}
	c.seen[u] = true
	c.list = append(c.list, u)
}

// List returns the kept citations (never nil).
func (c *Citations) List() []string {
	if c.list == nil {
		return []string{}
	}
	return c.list
}

// Types collects distinct output types in order of first appearance.
type Types struct {
	seen map[string]bool
	list []string
}

// Add records one output type; empty types are ignored.
func (t *Types) Add(s string) {
	if s == "" || t.seen[s] {
		return
	}
	if t.seen == nil {
		t.seen = map[string]bool{}
	}
	t.seen[s] = true
	t.list = append(t.list, s)
}

// List returns the types (never nil).
func (t *Types) List() []string {
	if t.list == nil {
		return []string{}
	}
	return t.list
}

// Text joins answer text blocks. Adjacent blocks are concatenated as they
// are (the provider split one text); blocks separated by tool activity (a
// Break) are joined with a blank line unless either side already has
// whitespace there.
type Text struct {
	b      strings.Builder
	broken bool
}

// Write appends one text block.
func (t *Text) Write(s string) {
	if s == "" {
		return
	}
	if t.broken && t.b.Len() > 0 {
		prev := t.b.String()
		if !endsSpace(prev) && !startsSpace(s) {
			t.b.WriteString("\n\n")
		}
	}
	t.broken = false
	t.b.WriteString(s)
}

// Break records tool activity between text blocks.
func (t *Text) Break() { t.broken = true }

// String returns the joined text.
func (t *Text) String() string { return t.b.String() }

func endsSpace(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return r == ' ' || r == '\n' || r == '\t' || r == '\r'
}

func startsSpace(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return r == ' ' || r == '\n' || r == '\t' || r == '\r'
}
