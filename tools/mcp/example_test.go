package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/mcp"
)

func Example() {
	// An MCP server with one tool, over streamable HTTP.
	server := sdk.NewServer(&sdk.Implementation{Name: "docs", Version: "1"}, nil)
	sdk.AddTool(server, &sdk.Tool{Name: "define", Description: "Define a word."},
		func(_ context.Context, _ *sdk.CallToolRequest, in struct {
			Word string `json:"word"`
		},
		) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: in.Word + ": a line of waiting jobs"}}}, nil, nil
		})
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return server }, nil))
	defer ts.Close()

	ctx := context.Background()
	servers, err := mcp.New(ctx, &mcp.Config{
		Servers: map[string]mcp.ServerConfig{"docs": {URL: ts.URL}},
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer servers.Close()
	for _, tool := range servers.Tools() {
		fmt.Println(tool.Name, tool.Catalog.ID, "MCP."+mcp.Namespace(tool.Server())+"."+tool.Catalog.Name)
		// A worker registers tool.Handle for tool.Name, with tool.Catalog.
		res, err := tool.Handle(ctx, &contracts.Job{ID: "j1", Tool: tool.Name, Session: "s1", Input: json.RawMessage(`{"word":"queue"}`)})
		fmt.Println(string(res), err)
	}
	// Output:
	// mcp.docs.define mcp:docs:define MCP.docs.define
	// {"content":[{"type":"text","text":"queue: a line of waiting jobs"}]} <nil>
}
