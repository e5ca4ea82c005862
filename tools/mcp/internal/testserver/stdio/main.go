// Command stdio serves the test tools on stdin and stdout, plus exit {},
// which ends the process in the middle of the call, and getenv {name}.
package main

import (
	"context"
	"log"
	"os"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolq/toolq/tools/mcp/internal/testserver"
)

func main() {
	s := testserver.New("stdio")
	sdk.AddTool(s, &sdk.Tool{Name: "exit", Description: "Ends the server process."},
		func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			os.Exit(3)
			return nil, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "getenv", Description: "The value of an environment variable."},
		func(_ context.Context, _ *sdk.CallToolRequest, in struct {
			Name string `json:"name"`
		},
		) (*sdk.CallToolResult, any, error) {
			v, ok := os.LookupEnv(in.Name)
			if !ok {
				v = "(unset)"
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: v}}}, nil, nil
		})
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		log.Print(err)
	}
}
