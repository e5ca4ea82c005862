package cli

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/toolq/toolq/tools/mcp"
	"github.com/toolq/toolq/worker"
)

// addMCPFlag adds --mcp-config to a worker command.
func addMCPFlag(cmd *cobra.Command, file *string) {
	cmd.Flags().StringVar(file, "mcp-config", "",
		`JSON file of MCP servers whose tools this worker runs: {"servers": {"<name>": {"command", "args", "env"} or {"url", "headers"}}}`)
}

// registerMCP connects to the MCP servers listed in file and registers each
// of their tools on w, as mcp.<server>.<tool> with its catalog entry
// mcp:<server>:<tool> (code-mode guests call it as MCP.<server>.<tool>).
// No file, no servers: it returns nil, which closes as nothing.
func registerMCP(ctx context.Context, g *globals, w *worker.Worker, file string) (*mcp.Servers, error) {
	if file == "" {
		return nil, nil
	}
	cfg, err := mcp.LoadConfig(file)
	if err != nil {
		return nil, err
	}
	cfg.Logger = g.log
	servers, err := mcp.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	for _, tool := range servers.Tools() {
		entry := tool.Catalog
		if err := w.Register(tool.Name, worker.HandlerFunc(tool.Handle), &worker.ToolConfig{Catalog: &entry}); err != nil {
			_ = servers.Close()
			return nil, fmt.Errorf("mcp: %w", err)
		}
	}
	g.log.Info("mcp tools registered", slog.Int("servers", len(cfg.Servers)), slog.Int("tools", len(servers.Tools())))
	return servers, nil
}
