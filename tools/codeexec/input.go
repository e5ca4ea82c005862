package codeexec

import (
	"encoding/json"
	"math"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/codeexec/provider"
)

// ToolName is the tool this package implements.
const ToolName = contracts.ToolCodeExecution

// Input limits.
const (
	// MaxTaskBytes bounds the task (the data travels inline).
	MaxTaskBytes = contracts.CodeExecutionMaxTaskBytes
	// MaxModelLength bounds a model id.
	MaxModelLength = contracts.CodeExecutionMaxModelLength
	// MaxTurnsLimit is the largest maxTurns a job may ask for.
	MaxTurnsLimit = contracts.CodeExecutionMaxTurns
	// MaxTimeoutSeconds is the largest per-attempt timeoutSeconds a job may
	// ask for.
	MaxTimeoutSeconds = contracts.CodeExecutionMaxTimeoutSeconds
)

// Input is the argument of a code_execution job; its Validate checks every
// field.
type Input = contracts.CodeExecutionInput

// DecodeInput parses and validates a job's input. Every failure is a
// *contracts.Error with code invalid_input; it never panics.
func DecodeInput(raw json.RawMessage) (*Input, error) { return contracts.DecodeCodeExecutionInput(raw) }

// validModel accepts model ids of letters, digits and . _ - : / @, at most
// MaxModelLength bytes.
func validModel(s string) bool { return contracts.ValidModelID(s) }

// Run is one executed code block of a result.
type Run = provider.Run

// Image is an image the code produced.
type Image = provider.Image

// Details is the result of a code_execution job (the code_execution contract's details plus
// runs, usage, attempts and the failover trail).
type Details = contracts.CodeExecutionDetails

// Usage is the token and tool accounting of a result.
type Usage = contracts.CodeExecutionUsage

// Result size limits, so a result fits a bus message.
const (
	MaxContentBytes   = 64 << 10
	MaxRunOutputBytes = 16 << 10
	MaxRunCodeBytes   = 32 << 10
	// MaxImageBytes bounds the inline data of the images of one result;
	// images past it keep their type but lose their data.
	MaxImageBytes = 512 << 10
)

// estimateCost prices usage: the provider's own figure when it reports one,
// else the configured or published prices, else nothing.
func estimateCost(u provider.Usage, p Pricing) (*float64, string) {
	if u.CostUSD != nil {
		c := *u.CostUSD
		return &c, "provider"
	}
	if p == (Pricing{}) {
		return nil, ""
	}
	c := float64(u.InputTokens)*p.InputPerMTokUSD/1e6 +
		float64(u.OutputTokens)*p.OutputPerMTokUSD/1e6 +
		float64(u.ToolCalls)*p.PerToolCallUSD
	c = math.Round(c*1e8) / 1e8
	return &c, "estimate"
}
