package contracts

import "encoding/json"

// Tool names on the bus: the <tool> of <prefix>.jobs.<tool>. Code mode's own
// tools (ToolCodeModeExec, ToolCodeModeWait, ToolCodeModeResult) are
// declared with its types.
const (
	// ToolNoop returns its input as its result (every worker has it unless
	// its builtins are disabled).
	ToolNoop = "noop"
	// ToolSleep waits SleepInput.Ms milliseconds, honouring cancellation.
	ToolSleep = "sleep"
	// ToolExec runs a shell command under the worker's policy: input
	// ExecInput; results ExecResult, ExecPendingResult, ExecDeniedResult, …
	ToolExec = "exec"
	// ToolExecDecide carries a person's signed ExecDecision on an approval:
	// input ExecDecideInput, result ExecDecideResult.
	ToolExecDecide = "exec.decide"
	// ToolCodeExecution sends a task to a model provider's code sandbox:
	// input CodeExecutionInput, result CodeExecutionDetails.
	ToolCodeExecution = "code_execution"
	// ToolMCPPrefix is the first token of every tool of an MCP server:
	// mcp.<server>.<tool> (see MCPTool).
	ToolMCPPrefix = "mcp"
)

// MCPTool is the bus tool of tool token on MCP server server:
// mcp.<server>.<token>.
func MCPTool(server, token string) string { return ToolMCPPrefix + "." + server + "." + token }

// MCPToolResult is the result of an MCP tool's job (mcp.<server>.<tool>),
// the code-mode contract's McpToolResult: the server's content items as it
// sent them, its structured content when the tool declares an output
// schema, and whether the tool reported an error. A tool that reports an
// error (isError) still completes: the caller decides what to do with it.
type MCPToolResult struct {
	Content           []json.RawMessage `json:"content"`
	StructuredContent json.RawMessage   `json:"structuredContent,omitempty"`
	IsError           bool              `json:"isError,omitempty"`
}

// SleepInput is the input of the sleep tool; its result is
// {"slept_ms": <ms>}.
type SleepInput struct {
	Ms int64 `json:"ms"`
}
