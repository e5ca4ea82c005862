// Package openai is the wire client of OpenAI's hosted Python sandbox: the
// Responses API (POST /v1/responses) with the code_interpreter tool and an
// automatically provisioned container ({"type":"auto"}).
//
// # Request
//
// The task goes in as one user message, store false, include
// ["code_interpreter_call.outputs"]; a positive turn limit becomes
// max_tool_calls. The key travels as a Bearer token.
//
// # Response
//
// The same output items as xAI's (the two APIs share a shape): output_text
// joined in order, code_interpreter_call items as runs whose logs outputs are
// plain text and whose image outputs carry a URL; the item status gives the
// outcome.
package openai
