package mcp

import (
	"context"
	"encoding/json"
	"fmt"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolq/toolq/contracts"
)

// kind is what a Tool calls on its server.
type kind int

const (
	kindTool     kind = iota // tools/call
	kindResource             // resources/read
	kindPrompt               // prompts/get
)

// The capability tools' schemas are toolq's own, not the server's: inputs
// checked before the call, results checked by code mode as any output.
const (
	resourceInputSchema = `{"type":"object","properties":{` +
		`"uri":{"type":"string","minLength":1,"maxLength":4096,"description":"the resource's URI"}},` +
		`"required":["uri"],"additionalProperties":false}`
	resourceOutputSchema = `{"type":"object","properties":{` +
		`"contents":{"type":"array","items":{"type":"object","properties":{` +
		`"uri":{"type":"string"},"mimeType":{"type":"string"},"text":{"type":"string"},"blob":{"type":"string"}},` +
		`"required":["uri"]}}},"required":["contents"]}`
	promptInputSchema = `{"type":"object","properties":{` +
		`"name":{"type":"string","minLength":1,"maxLength":256,"description":"the prompt's name"},` +
		`"arguments":{"type":"object","additionalProperties":{"type":"string"},"description":"the prompt's arguments"}},` +
		`"required":["name"],"additionalProperties":false}`
	promptOutputSchema = `{"type":"object","properties":{` +
		`"description":{"type":"string"},` +
		`"messages":{"type":"array","items":{"type":"object","properties":{` +
		`"role":{"type":"string"},"content":{"type":"object"}},"required":["role","content"]}}},` +
		`"required":["messages"]}`
)

// reservedToken reports a tool token taken by a capability tool's catalog
// id: a server tool of that name is left out.
func reservedToken(token string) bool {
	return token == contracts.MCPResourcesReadToken || token == contracts.MCPPromptsGetToken
}

// capabilityTools returns the resources/read and prompts/get tools of a
// server that declared those capabilities when it initialized.
func (s *server) capabilityTools(init *sdk.InitializeResult) ([]Tool, error) {
	if init == nil || init.Capabilities == nil {
		return nil, nil
	}
	var out []Tool
	add := func(k kind, name, token, tool, remote, desc, in, outSchema string) error {
		compiled, err := compile(json.RawMessage(in))
		if err != nil {
			return fmt.Errorf("%s input schema: %w", name, err)
		}
		out = append(out, Tool{
			Name: tool,
			Catalog: contracts.CatalogTool{
				ID: contracts.SourceMCP + ":" + s.name + ":" + token, Tool: tool, Name: name,
				Description: desc, Source: contracts.SourceMCP,
				InputSchema: json.RawMessage(in), OutputSchema: json.RawMessage(outSchema),
				// Reads, by the protocol's definition (not by the
				// server's word): restartSafe runs may make them.
				SideEffects: false,
			},
			srv: s, remote: remote, inSchema: compiled, kind: k,
		})
		return nil
	}
	if init.Capabilities.Resources != nil {
		if err := add(kindResource, contracts.MCPResourcesRead, contracts.MCPResourcesReadToken, contracts.MCPResourcesReadTool(s.name),
			"resources/read", "Read a resource of MCP server "+s.name+" by its URI.", resourceInputSchema, resourceOutputSchema); err != nil {
			return nil, err
		}
	}
	if init.Capabilities.Prompts != nil {
		if err := add(kindPrompt, contracts.MCPPromptsGet, contracts.MCPPromptsGetToken, contracts.MCPPromptsGetTool(s.name),
			"prompts/get", "Get a prompt of MCP server "+s.name+" by its name, with its arguments.", promptInputSchema, promptOutputSchema); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readResource calls resources/read with the (checked) input.
func (t Tool) readResource(ctx context.Context, cs *sdk.ClientSession, args map[string]any) (json.RawMessage, error) {
	uri, _ := args["uri"].(string)
	res, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri})
	if err != nil {
		return nil, err
	}
	out := contracts.MCPReadResourceResult{Contents: make([]json.RawMessage, 0, len(res.Contents))}
	for _, c := range res.Contents {
		if c == nil {
			continue
		}
		b, err := json.Marshal(c)
		if err != nil {
			return nil, unusable{err}
		}
		out.Contents = append(out.Contents, b)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, unusable{err}
	}
	return b, nil
}

// getPrompt calls prompts/get with the (checked) input.
func (t Tool) getPrompt(ctx context.Context, cs *sdk.ClientSession, args map[string]any) (json.RawMessage, error) {
	p := &sdk.GetPromptParams{}
	p.Name, _ = args["name"].(string)
	if a, ok := args["arguments"].(map[string]any); ok && len(a) > 0 {
		p.Arguments = make(map[string]string, len(a))
		for k, v := range a {
			p.Arguments[k], _ = v.(string)
		}
	}
	res, err := cs.GetPrompt(ctx, p)
	if err != nil {
		return nil, err
	}
	out := contracts.MCPGetPromptResult{
		Description: clean(res.Description, maxDescription, false),
		Messages:    make([]json.RawMessage, 0, len(res.Messages)),
	}
	for _, m := range res.Messages {
		if m == nil {
			continue
		}
		b, err := json.Marshal(m)
		if err != nil {
			return nil, unusable{err}
		}
		out.Messages = append(out.Messages, b)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, unusable{err}
	}
	return b, nil
}

// unusable is a result that came back but cannot be passed on.
type unusable struct{ err error }

func (u unusable) Error() string { return "unusable result: " + u.err.Error() }
