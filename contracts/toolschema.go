package contracts

import "bytes"

var (
	codeModeExecInputSchema = mustSchema("schema/code_mode.exec.input.schema.json")
	codeModeWaitInputSchema = mustSchema("schema/code_mode.wait.input.schema.json")
	codeModeResultSchema    = mustSchema("schema/code_mode.result.schema.json")
)

// CodeModeExecInputSchema returns the JSON Schema (draft 2020-12) of a
// code_mode.exec job's input, the wire form of CodeModeExecInput: what
// [CodeModeExecInput.Validate] accepts passes it. The model-facing
// definitions of code_mode.exec are made from it. The caller gets its own
// copy.
func CodeModeExecInputSchema() []byte { return bytes.Clone(codeModeExecInputSchema) }

// CodeModeWaitInputSchema returns the JSON Schema of a code_mode.wait job's
// input, the wire form of CodeModeWaitInput. The caller gets its own copy.
func CodeModeWaitInputSchema() []byte { return bytes.Clone(codeModeWaitInputSchema) }

// CodeModeResultSchema returns the JSON Schema of CodeModeResult, the result
// of code_mode.exec and code_mode.wait (completed, waiting or failed). The
// caller gets its own copy.
func CodeModeResultSchema() []byte { return bytes.Clone(codeModeResultSchema) }
