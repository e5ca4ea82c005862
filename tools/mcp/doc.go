// Package mcp turns the tools of MCP (Model Context Protocol) servers into
// toolq tools: each becomes a bus tool that a worker runs and a catalog
// entry that code-mode guests call as MCP.<server>.<tool>({...}).
//
// # Configuration
//
// A worker lists its servers by name, each either a command speaking MCP on
// stdio or a streamable HTTP endpoint:
//
//	{"servers": {
//	  "github": {"url": "https://mcp.example.com/github", "headers": {"Authorization": "Bearer …"}},
//	  "chrome-devtools": {"command": "chrome-devtools-mcp", "args": ["--headless"], "env": {"DEBUG": "0"}}
//	}}
//
// A server name is an id token of at most MaxServerName bytes; two names
// that would share a guest namespace (my-srv, my_srv) are refused. A stdio
// server inherits only a minimal environment (PATH, HOME, LANG…) plus its
// env, never the worker's credentials.
//
// # Tools
//
// New connects to every server (within ConnectTimeout), lists its tools and
// fails when a server cannot be reached: a worker does not start with a
// server it cannot use. Register does the same and adds every tool to a
// worker, whose extension the servers become (the worker's Stop ends their
// sessions). Each tool of server S named T is:
//
//   - the bus tool mcp.S.T (jobs on <prefix>.jobs.mcp.S.T);
//   - the catalog entry mcp:S:T, source mcp, with the tool's description
//     and input schema; its output schema describes the McpToolResult, with
//     the tool's own output schema (if any) as structuredContent;
//   - in code mode, the function MCP.<Namespace(S)>.<camelCase(T)>, listed
//     in API.read("mcp/<Namespace(S)>.d.ts") and $api().
//
// A tool name that is not an id token ("a.b/c") gets its other characters
// replaced by '_' and a short hash of the original name appended.
//
// # Resources and prompts
//
// A server that declares the resources capability also gets the bus tool
// mcp.S.resources.read (catalog entry mcp:S:resources--read, input {uri}),
// and one that declares prompts mcp.S.prompts.get (mcp:S:prompts--get,
// input {name, arguments}); guests call them as MCP.<ns>.resources.read
// and MCP.<ns>.prompts.get. Their schemas are toolq's own; the results are
// contracts.MCPReadResourceResult and contracts.MCPGetPromptResult. They
// are reads and may be made by restartSafe runs. A server tool named
// resources--read or prompts--get is left out.
//
// # Tenants
//
// A server's "tenants" keeps it to those tenants ("" is the default one):
// its tools are pulled only from their jobs streams and only their
// code-mode runs see them (worker.ToolConfig.Tenants). Without it, every
// tenant the worker serves uses the server.
//
// # Untrusted metadata
//
// What a server says about its tools is not trusted: descriptions and
// labels are bounded and made valid UTF-8, schemas must be JSON objects of
// at most 64 KiB nested at most 32 deep, and must compile without loading
// anything (a $ref to a file, a URL or an unknown meta-schema is refused).
// A tool with an unusable input schema is left out; an unusable output
// schema is dropped. At most 256 tools per server. Every MCP tool is marked
// as having side effects (restartSafe runs do not call them), whatever its
// annotations claim.
//
// # Calls
//
// Tool.Handle checks the job's input (a JSON object, empty means {})
// against the input schema and calls tools/call. The result is the code-mode contract's
// McpToolResult {content, structuredContent, isError}; a tool that reports
// an error (isError) still completes. Failures are *contracts.Error:
//
//   - invalid_input: the input is not an object or does not match the
//     schema, or the server refuses the arguments (for resources and
//     prompts: an unknown resource or prompt);
//   - provider_unavailable, retryable: the server cannot be reached or the
//     session broke; the session is dropped and the next call connects
//     again (a stdio server is started again);
//   - provider_error: any other protocol error from the server;
//   - timeout (retryable) and cancelled: the job's own context; a slow call
//     leaves the session to the others.
package mcp
