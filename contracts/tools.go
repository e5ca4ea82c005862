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

// An MCP server's resources and prompts, as bus tools of their own. Their
// bus tools have four tokens (mcp.<server>.resources.read), so no tool of
// the server (always three) is ever one of them; their catalog entries are
// named MCPResourcesRead and MCPPromptsGet, which the guest calls as
// MCP.<server>.resources.read({uri}) and MCP.<server>.prompts.get({name,
// arguments}).
const (
	// MCPResourcesRead is the catalog name of a server's resources/read
	// (input MCPReadResourceInput, result MCPReadResourceResult).
	MCPResourcesRead = "resources.read"
	// MCPPromptsGet is the catalog name of a server's prompts/get (input
	// MCPGetPromptInput, result MCPGetPromptResult).
	MCPPromptsGet = "prompts.get"
	// MCPResourcesReadToken and MCPPromptsGetToken are the last parts of
	// their catalog ids, mcp:<server>:resources--read and
	// mcp:<server>:prompts--get; a server tool of either name is left out.
	MCPResourcesReadToken = "resources--read"
	MCPPromptsGetToken    = "prompts--get"
)

// MCPResourcesReadTool is the bus tool of server's resources/read:
// mcp.<server>.resources.read.
func MCPResourcesReadTool(server string) string {
	return ToolMCPPrefix + "." + server + "." + MCPResourcesRead
}

// MCPPromptsGetTool is the bus tool of server's prompts/get:
// mcp.<server>.prompts.get.
func MCPPromptsGetTool(server string) string {
	return ToolMCPPrefix + "." + server + "." + MCPPromptsGet
}

// MCPReadResourceInput is the input of mcp.<server>.resources.read.
type MCPReadResourceInput struct {
	URI string `json:"uri"`
}

// MCPReadResourceResult is its result: the server's contents, each
// {uri, mimeType?, text? | blob? (base64)} as the server sent them.
type MCPReadResourceResult struct {
	Contents []json.RawMessage `json:"contents"`
}

// MCPGetPromptInput is the input of mcp.<server>.prompts.get: the prompt's
// name and its arguments (strings, as MCP has them).
type MCPGetPromptInput struct {
	Name      string            `json:"name"`
	Arguments map[string]string `json:"arguments,omitempty"`
}

// MCPGetPromptResult is its result: the prompt's description and its
// messages, each {role, content} as the server sent them.
type MCPGetPromptResult struct {
	Description string            `json:"description,omitempty"`
	Messages    []json.RawMessage `json:"messages"`
}

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
