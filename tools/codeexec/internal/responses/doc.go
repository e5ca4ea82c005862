// Package responses builds and parses the Responses API shape that xAI and
// OpenAI share: one user message in, output items (message, reasoning,
// code_interpreter_call) out.
package responses
