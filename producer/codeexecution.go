package producer

import (
	"context"
	"encoding/json"

	"github.com/toolq/toolq/contracts"
)

// SubmitCodeExecution enqueues a code_execution job: in's task runs in a
// model provider's code sandbox. The input is checked first
// (invalid_input). Its result is a contracts.CodeExecutionDetails
// (DecodeResult); a failure's Details are a contracts.CodeExecutionFailure,
// or a contracts.CodeExecutionMissingCredentials for code
// missing_credentials.
func (p *Producer) SubmitCodeExecution(ctx context.Context, in *contracts.CodeExecutionInput, opts *SubmitOpts) (*contracts.Job, error) {
	if in == nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "code_execution input must be a JSON object with a task")
	}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	data, err := json.Marshal(in)
	if err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "code_execution input cannot be encoded: %v", err)
	}
	return p.Submit(ctx, contracts.ToolCodeExecution, data, opts)
}
