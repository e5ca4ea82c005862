package cli

import (
	"context"
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
// The worker's Stop closes them. No file, no servers.
func registerMCP(ctx context.Context, g *globals, w *worker.Worker, file string) error {
	if file == "" {
		return nil
	}
	cfg, err := mcp.LoadConfig(file)
	if err != nil {
		return err
	}
	cfg.Logger = g.log
	servers, err := mcp.Register(ctx, w, cfg)
	if err != nil {
		return err
	}
	g.log.Info("mcp tools registered", slog.Int("servers", len(cfg.Servers)), slog.Int("tools", len(servers.Tools())))
	return nil
}
