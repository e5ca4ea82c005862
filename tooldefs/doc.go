// Package tooldefs makes the definitions of toolq's tools that a model is
// given: the model-facing surface of the code-mode contract, in the tool
// formats of OpenAI (Responses and Chat Completions), Anthropic Messages,
// Gemini and MCP. It imports only contracts.
//
// # The surface
//
// [Build] takes the tools of the toolq_catalog bucket and a [Config] and
// returns a [Surface]. With code mode engaged (Config.CodeMode "true", or
// "auto" for a model listed in Config.PreferredModels) the model sees
// code_mode.exec and code_mode.wait, plus the catalog's direct-only tools;
// every other tool is reached from the run's code, and the description of
// code_mode.exec carries a bounded quick index of them (exact catalog ids,
// compact input hints, output hints for the workers' own tools, no MCP
// entries). With code mode off the model sees the catalog's tools directly
// (code_execution, exec, MCP servers' tools, …), as if code mode did not
// exist. "auto" with a model not listed keeps code mode off, as the
// code-mode contract's "capable" models.
//
// The input schemas are the ones the workers validate with: code mode's
// from [contracts.CodeModeExecInputSchema] and
// [contracts.CodeModeWaitInputSchema], every other tool's from the catalog
// entry its worker wrote.
//
// # Names
//
// A model-facing name is the bus tool with its dots as underscores
// (code_mode.exec is code_mode_exec), which every provider accepts
// ([A-Za-z0-9_-], at most 64 bytes, a letter or underscore first); a longer
// or colliding name is cut and given a hash of the tool. [Surface.Lookup]
// maps a name a model called back to its [Definition] and bus tool.
//
// # Formats
//
// [Format] renders a surface as one provider's tools array. Gemini takes
// the OpenAPI subset of JSON Schema: the schemas are converted (upper-case
// types, nullable instead of a null type, no $ref, no
// additionalProperties, no exclusive bounds), and a property the subset
// cannot describe (a map of strings) is left out when it is optional.
package tooldefs
