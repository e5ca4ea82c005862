package mcp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/mcp"
	"github.com/toolq/toolq/tools/mcp/internal/testserver"
)

// TestResourcesAndPrompts: a server that declares resources and prompts
// gets mcp.<server>.resources.read and mcp.<server>.prompts.get, with
// catalog entries of toolq's own schemas; their inputs are checked before
// the call, an unknown resource or prompt is invalid_input, and a server
// that fails to read is provider_error. A server without the capabilities
// gets neither tool.
func TestResourcesAndPrompts(t *testing.T) {
	t.Parallel()
	srv := testserver.WithCapabilities("docs")
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	plain := startHTTP(t, "")
	s := open(t, &mcp.Config{Servers: map[string]mcp.ServerConfig{"docs": {URL: ts.URL}, "plain": {URL: plain.URL}}})
	tools := byName(t, s)
	require.NotContains(t, tools, "mcp.plain.resources.read")
	require.NotContains(t, tools, "mcp.plain.prompts.get")

	read, get := tools["mcp.docs.resources.read"], tools["mcp.docs.prompts.get"]
	for _, tool := range []mcp.Tool{read, get} {
		require.NotEmpty(t, tool.Name, "tools: %v", tools)
		require.NoError(t, tool.Catalog.Validate())
		require.True(t, contracts.ValidTool(tool.Name))
		require.Equal(t, contracts.SourceMCP, tool.Catalog.Source)
		require.False(t, tool.Catalog.SideEffects, "reads, by the protocol")
	}
	require.Equal(t, "mcp:docs:resources--read", read.Catalog.ID)
	require.Equal(t, contracts.MCPResourcesRead, read.Catalog.Name)
	require.Equal(t, "mcp:docs:prompts--get", get.Catalog.ID)
	require.Equal(t, contracts.MCPPromptsGet, get.Catalog.Name)

	res, err := call(t, read, `{"uri":"memo://one"}`)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"contents": []any{map[string]any{"uri": "memo://one", "mimeType": "text/plain", "text": "first memo of docs"}}}, res)

	res, err = call(t, get, `{"name":"brief","arguments":{"topic":"release"}}`)
	require.NoError(t, err)
	require.Equal(t, map[string]any{
		"description": "Briefing on release",
		"messages":    []any{map[string]any{"role": "user", "content": map[string]any{"type": "text", "text": "Brief me on release."}}},
	}, res)

	for _, c := range []struct {
		tool  mcp.Tool
		input string
		code  contracts.ErrorCode
		msg   string
	}{
		{read, `{"uri":"memo://nope"}`, contracts.CodeInvalidInput, "memo://nope"},
		{read, `{}`, contracts.CodeInvalidInput, "does not match its schema"},
		{read, ``, contracts.CodeInvalidInput, `input must be {"uri": string}`},
		{read, `{"uri":"memo://one","extra":1}`, contracts.CodeInvalidInput, "does not match its schema"},
		{read, `{"uri":"memo://broken"}`, contracts.CodeProviderError, "the memo store is down"},
		{get, `{"name":"nope"}`, contracts.CodeInvalidInput, `unknown prompt "nope"`},
		{get, `{"name":"brief","arguments":{"topic":3}}`, contracts.CodeInvalidInput, "does not match its schema"},
		{get, `{"name":"brief"}`, contracts.CodeProviderError, "brief needs a topic"},
	} {
		_, err := call(t, c.tool, c.input)
		require.Error(t, err, "%s %s", c.tool.Name, c.input)
		ce := codeOf(t, err)
		require.Equal(t, c.code, ce.Code, "%s %s: %v", c.tool.Name, c.input, ce)
		require.Contains(t, ce.Message, c.msg)
		require.False(t, ce.Retryable)
	}
}
