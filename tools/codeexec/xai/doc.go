// Package xai is the wire client of xAI's server-side Python sandbox: the
// Responses API (POST /v1/responses) with the code_interpreter tool.
//
// # Request
//
// The task goes in as one user message, with tools
// [{"type":"code_interpreter"}], store false, include
// ["code_interpreter_call.outputs"], reasoning {"effort":"low"} only for
// grok-4.3 and grok-4.6, and max_turns only when a positive limit is set.
// The key travels as a Bearer token.
//
// # Response
//
// output_text blocks are joined in order into the answer;
// code_interpreter_call items become runs, their logs output (a JSON string
// {stdout, stderr, exit_code, command_timed_out}) giving output and outcome.
// Citations come from url_citation annotations and the top-level citations
// list. usage.cost_in_usd_ticks (1e-10 USD) is the provider's own cost.
//
// Retries, breakers and failover live in package providers; this package
// makes one HTTP exchange per call.
package xai
