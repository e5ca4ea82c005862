package responses

import (
	"encoding/json"
	"strings"

	"github.com/toolq/toolq/tools/codeexec/internal/transport"
	"github.com/toolq/toolq/tools/codeexec/provider"
)

// Path is the Responses endpoint below the base URL.
const Path = "/v1/responses"

// IncludeOutputs asks for the code interpreter's outputs in the response.
const IncludeOutputs = "code_interpreter_call.outputs"

// InputMessage is one input item.
type InputMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Reasoning is the reasoning option.
type Reasoning struct {
	Effort string `json:"effort"`
}

// Body is a Responses request body.
type Body struct {
	Model        string         `json:"model"`
	Input        []InputMessage `json:"input"`
	Tools        []any          `json:"tools"`
	Store        bool           `json:"store"`
	Include      []string       `json:"include,omitempty"`
	Reasoning    *Reasoning     `json:"reasoning,omitempty"`
	MaxTurns     int            `json:"max_turns,omitempty"`
	MaxToolCalls int            `json:"max_tool_calls,omitempty"`
}

type response struct {
	Model     string          `json:"model"`
	Status    string          `json:"status"`
	Error     json.RawMessage `json:"error"`
	Output    []outputItem    `json:"output"`
	Citations []string        `json:"citations"`
	Usage     *usage          `json:"usage"`
}

type outputItem struct {
	Type    string        `json:"type"`
	Status  string        `json:"status"`
	Code    string        `json:"code"`
	Outputs []ciOutput    `json:"outputs"`
	Content []contentPart `json:"content"`
}

type ciOutput struct {
	Type string `json:"type"`
	Logs string `json:"logs"`
	URL  string `json:"url"`
}

type contentPart struct {
	Type        string       `json:"type"`
	Text        string       `json:"text"`
	Annotations []annotation `json:"annotations"`
}

type annotation struct {
	Type string `json:"type"`
	URL  string `json:"url"`
}

type usage struct {
	InputTokens         int64 `json:"input_tokens"`
	OutputTokens        int64 `json:"output_tokens"`
	OutputTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	ServerSideToolUsageDetails *struct {
		CodeInterpreterCalls int64 `json:"code_interpreter_calls"`
	} `json:"server_side_tool_usage_details"`
	CostInUSDTicks *int64 `json:"cost_in_usd_ticks"`
}

// usdPerTick is xAI's cost unit: cost_in_usd_ticks are 1e-10 USD.
const usdPerTick = 1e-10

// logs is xAI's JSON-encoded logs output.
type logs struct {
	Stdout          *string `json:"stdout"`
	Stderr          string  `json:"stderr"`
	ExitCode        *int    `json:"exit_code"`
	CommandTimedOut bool    `json:"command_timed_out"`
}

// Parse parses a Responses body from provider p. Errors are *provider.Error:
// KindMalformed for a body that is not the expected JSON, KindServer for a
// response the provider marked failed, KindNoAnswer when there is no text.
func Parse(p string, data []byte, requestedModel string) (*provider.Response, error) {
	var r response
	if err := transport.Decode(p, data, &r); err != nil {
		return nil, err
	}
	out := &provider.Response{Model: r.Model}
	if out.Model == "" {
		out.Model = requestedModel
	}
	var text strings.Builder
	var cites provider.Citations
	var types provider.Types
	calls := int64(0)
	for _, item := range r.Output {
		types.Add(item.Type)
		switch item.Type {
		case "message":
			for _, c := range item.Content {
				if c.Type != "output_text" && c.Type != "text" {
					continue
				}
				text.WriteString(c.Text)
				for _, a := range c.Annotations {
					if a.URL != "" || a.Type == "url_citation" {
						cites.Add(a.URL)
					} else {
						cites.Add("") // scanned, not kept
					}
				}
			}
		case "output_text":
			text.WriteString(item.text())
		case "code_interpreter_call", "code_execution_call":
			out.UsedCodeExecution = true
			calls++
			out.Runs = append(out.Runs, run(item))
		}
	}
	for _, c := range r.Citations {
		cites.Add(c)
	}
	out.Content = text.String()
	out.Citations = cites.List()
	out.OutputTypes = types.List()
	if r.Usage != nil {
		out.Usage.InputTokens = r.Usage.InputTokens
		out.Usage.OutputTokens = r.Usage.OutputTokens
		if d := r.Usage.OutputTokensDetails; d != nil {
			out.Usage.ReasoningTokens = d.ReasoningTokens
		}
		if d := r.Usage.ServerSideToolUsageDetails; d != nil && d.CodeInterpreterCalls > calls {
			calls = d.CodeInterpreterCalls
		}
		if t := r.Usage.CostInUSDTicks; t != nil && *t >= 0 {
			c := float64(*t) * usdPerTick
			out.Usage.CostUSD = &c
		}
	}
	out.Usage.ToolCalls = calls
	if strings.TrimSpace(out.Content) == "" {
		if r.Status == "failed" && len(r.Error) > 0 && string(r.Error) != "null" {
			return nil, &provider.Error{Provider: p, Kind: provider.KindServer, Message: "response failed: " + transport.ErrorMessage([]byte(`{"error":`+string(r.Error)+`}`))}
		}
		return nil, provider.NoAnswer(p)
	}
	return out, nil
}

// text is the text of an output item that carries text directly.
func (o outputItem) text() string {
	var b strings.Builder
	for _, c := range o.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func run(item outputItem) provider.Run {
	r := provider.Run{Code: item.Code, Language: "python", Outcome: provider.OutcomeUnspecified}
	switch item.Status {
	case "completed":
		r.Outcome = provider.OutcomeOK
	case "failed":
		r.Outcome = provider.OutcomeFailed
	}
	var out strings.Builder
	for _, o := range item.Outputs {
		switch o.Type {
		case "logs":
			var l logs
			s := strings.TrimSpace(o.Logs)
			if strings.HasPrefix(s, "{") && json.Unmarshal([]byte(s), &l) == nil && (l.Stdout != nil || l.ExitCode != nil) {
				if l.Stdout != nil {
					out.WriteString(*l.Stdout)
				}
				out.WriteString(l.Stderr)
				switch {
				case l.CommandTimedOut:
					r.Outcome = provider.OutcomeDeadlineExceeded
				case l.ExitCode != nil && *l.ExitCode != 0:
					r.Outcome = provider.OutcomeFailed
				case l.ExitCode != nil:
					r.Outcome = provider.OutcomeOK
				}
			} else {
				out.WriteString(o.Logs)
			}
		case "image":
			if o.URL != "" {
				r.Images = append(r.Images, provider.Image{URL: o.URL})
			}
		}
	}
	r.Output = out.String()
	return r
}
