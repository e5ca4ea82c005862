package tooldefstest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// CheckMCP checks an MCP tools array (tooldefs' mcp format) by the spec's
// rules (CheckMCPNames), then gives every tool to a go-sdk server, which
// panics on a schema that is not an object and logs an error on a bad
// name, and lists them back with a go-sdk client over an in-memory
// transport.
func CheckMCP(ctx context.Context, raw json.RawMessage) (err error) {
	if err := CheckMCPNames(raw); err != nil {
		return err
	}
	var tools []*sdk.Tool
	if err := json.Unmarshal(raw, &tools); err != nil {
		return fmt.Errorf("tools: %w", err)
	}
	var logs bytes.Buffer
	server := sdk.NewServer(&sdk.Implementation{Name: "tooldefstest", Version: "1"}, &sdk.ServerOptions{
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("go-sdk refused a tool: %v", r)
		}
	}()
	for _, t := range tools {
		server.AddTool(t, func(context.Context, *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			return &sdk.CallToolResult{}, nil
		})
	}
	if logs.Len() > 0 {
		return fmt.Errorf("go-sdk: %s", logs.String())
	}
	st, ct := sdk.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		return err
	}
	defer ss.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "tooldefstest-client", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	listed, err := cs.ListTools(ctx, nil)
	if err != nil {
		return err
	}
	var got, want []string
	for _, t := range listed.Tools {
		got = append(got, t.Name)
	}
	for _, t := range tools {
		want = append(want, t.Name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("go-sdk client listed %v, want %v", got, want)
	}
	return nil
}
