package cli

import (
	"slices"
	"strings"

	"github.com/toolq/toolq/contracts"
)

// The tool packs a worker can serve, as --tools names them.
const (
	packCodeExecution = "code_execution" // code_execution
	packCodeMode      = "code_mode"      // code_mode.exec, .wait, .result
	packExec          = "exec"           // exec, exec.decide
	packMCP           = "mcp"            // mcp.<server>.<tool>, with --mcp-config
)

var toolPacks = []string{packCodeExecution, packCodeMode, packExec, packMCP}

// packSet is which packs a worker registers.
type packSet map[string]bool

// selectPacks turns --tools and the --no-* switches into the packs a
// worker serves. No --tools: every pack the switches leave on (MCP with
// --mcp-config). With --tools: exactly those, so a tool group of a
// deployment consumes nothing else; a pack both named and switched off,
// an unknown name, or mcp without --mcp-config is refused.
func selectPacks(tools []string, noCodeMode, noExec bool, mcpConfig string) (packSet, error) {
	set := packSet{}
	if len(tools) == 0 {
		set[packCodeExecution] = true
		set[packCodeMode] = !noCodeMode
		set[packExec] = !noExec
		set[packMCP] = mcpConfig != ""
		return set, nil
	}
	for _, raw := range tools {
		name := strings.TrimSpace(raw)
		if !slices.Contains(toolPacks, name) {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "--tools: unknown tool pack %q (known: %s)", name, strings.Join(toolPacks, ", "))
		}
		set[name] = true
	}
	switch {
	case set[packCodeMode] && noCodeMode:
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "--tools names code_mode and --no-code-mode turns it off")
	case set[packExec] && noExec:
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "--tools names exec and --no-exec turns it off")
	case set[packMCP] && mcpConfig == "":
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "--tools names mcp: it needs --mcp-config")
	case !set[packMCP] && mcpConfig != "":
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "--mcp-config is given but --tools does not name mcp")
	}
	return set, nil
}
