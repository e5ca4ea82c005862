// Package anthropic is the wire client of Anthropic's server-side code
// execution tool: POST /v1/messages with tools
// [{"type":"code_execution_20250825","name":"code_execution"}] and the
// headers x-api-key, anthropic-version 2023-06-01 and anthropic-beta
// code-execution-2025-08-25.
//
// # Response
//
// The content blocks come in order: text (joined into the answer, with a
// blank line where code ran between blocks, its citations kept),
// server_tool_use (bash_code_execution {command}, text_editor_code_execution
// {command, path, file_text}, or the legacy code_execution {code}) and the
// matching *_tool_result blocks (bash_code_execution_result {stdout, stderr,
// return_code, content:[{file_id}]}, a *_tool_result_error {error_code}, or
// the legacy code_execution_result).
// Each server_tool_use opens a run that the result with its tool_use_id
// completes; output files are kept as file ids.
//
// A pause_turn stop reason means the API paused a long turn: the client
// sends the content back as the assistant turn, in the same container, up to
// MaxTurns times (DefaultContinuations when unset), and merges the answers.
// Code execution is billed by container time, not per call, so no per-call
// price is published here.
package anthropic
