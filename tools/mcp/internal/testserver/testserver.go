// Package testserver is a small MCP server for tests: the same tools over
// streamable HTTP (in the test process) and stdio (a built program).
package testserver

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// EchoIn is the input of echo.
type EchoIn struct {
	Text  string `json:"text" jsonschema:"the text to echo"`
	Times int    `json:"times,omitempty" jsonschema:"how many times (1 when absent)"`
}

// AddIn is the input of add.
type AddIn struct {
	A float64 `json:"a"`
	B float64 `json:"b"`
}

// AddOut is the output of add (its output schema).
type AddOut struct {
	Sum float64 `json:"sum"`
}

// New returns a server named name with the test tools:
//   - echo {text, times?} → text content (no output schema)
//   - add {a, b} → structuredContent {sum} (output schema)
//   - fail {reason} → a tool error (isError)
//   - pid {} → the server's process id as text
//   - block {} → returns only when the call is cancelled
//   - broken {} → a JSON-RPC error (not a tool error)
//   - measure {} → structuredContent {size: 3}, its output schema with $defs
//   - leaky {} → an output schema that refers to a file
//   - "weird.name/v2" {} → text "weird"
//   - outside {} → an input schema that refers to a file (refused by
//     clients that do not fetch what servers point at)
//
// and, with WithCapabilities, the resources memo://one (text "first memo
// of <name>") and memo://broken (a server error), and the prompt brief
// {topic (required)} → one user message "Brief me on <topic>.".
func New(name string) *sdk.Server {
	return build(name, false)
}

// WithCapabilities is New with resources and prompts.
func WithCapabilities(name string) *sdk.Server {
	return build(name, true)
}

func build(name string, capabilities bool) *sdk.Server {
	s := sdk.NewServer(&sdk.Implementation{Name: name, Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "echo", Description: "Echo text back.\nRepeats it `times` times."},
		func(_ context.Context, _ *sdk.CallToolRequest, in EchoIn) (*sdk.CallToolResult, any, error) {
			n := max(in.Times, 1)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat(in.Text, n)}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "add", Title: "Add numbers", Description: "Add two numbers."},
		func(_ context.Context, _ *sdk.CallToolRequest, in AddIn) (*sdk.CallToolResult, AddOut, error) {
			return nil, AddOut{Sum: in.A + in.B}, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "fail", Description: "Always fails."},
		func(_ context.Context, _ *sdk.CallToolRequest, in struct {
			Reason string `json:"reason"`
		},
		) (*sdk.CallToolResult, any, error) {
			return nil, nil, errors.New("boom: " + in.Reason)
		})
	sdk.AddTool(s, &sdk.Tool{Name: "pid", Description: "The server's process id."},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strconv.Itoa(os.Getpid())}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "block", Description: "Blocks until the call is cancelled."},
		func(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, any, error) {
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	s.AddTool(&sdk.Tool{
		Name: "measure", Description: "Its output schema has definitions.", InputSchema: json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"object","$defs":{"n":{"type":"integer","minimum":0}},"properties":{"size":{"$ref":"#/$defs/n"}},"required":["size"]}`),
	}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: `{"size":3}`}}, StructuredContent: map[string]any{"size": 3}}, nil
	})
	s.AddTool(&sdk.Tool{
		Name: "leaky", Description: "Its output schema points at a file.", InputSchema: json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"$ref":"file:///etc/hostname"}}}`),
	}, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "leaky"}}, StructuredContent: map[string]any{"x": 1}}, nil
	})
	s.AddTool(&sdk.Tool{Name: "broken", Description: "Answers with a protocol error.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return nil, errors.New("broken on purpose")
		})
	s.AddTool(&sdk.Tool{Name: "weird.name/v2", Description: "A name that is not an id token.", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "weird"}}}, nil
		})
	s.AddTool(&sdk.Tool{Name: "outside", Description: "Its schema points at a file.", InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"$ref":"file:///etc/hostname"}}}`)},
		func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "outside"}}}, nil
		})
	if capabilities {
		addCapabilities(s, name)
	}
	return s
}

func addCapabilities(s *sdk.Server, name string) {
	s.AddResource(&sdk.Resource{URI: "memo://one", Name: "one", MIMEType: "text/plain"},
		func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{
				{URI: req.Params.URI, MIMEType: "text/plain", Text: "first memo of " + name},
			}}, nil
		})
	s.AddResource(&sdk.Resource{URI: "memo://broken", Name: "broken"},
		func(context.Context, *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
			return nil, errors.New("the memo store is down")
		})
	s.AddPrompt(&sdk.Prompt{Name: "brief", Description: "A briefing.", Arguments: []*sdk.PromptArgument{{Name: "topic", Required: true}}},
		func(_ context.Context, req *sdk.GetPromptRequest) (*sdk.GetPromptResult, error) {
			topic := req.Params.Arguments["topic"]
			if topic == "" {
				return nil, errors.New("brief needs a topic")
			}
			return &sdk.GetPromptResult{Description: "Briefing on " + topic, Messages: []*sdk.PromptMessage{
				{Role: "user", Content: &sdk.TextContent{Text: "Brief me on " + topic + "."}},
			}}, nil
		})
}
