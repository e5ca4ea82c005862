package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/toolq/toolq/contracts"
)

// Names of the diagnostic tools a worker has when Config.Builtins is set.
const (
	ToolNoop  = contracts.ToolNoop
	ToolSleep = contracts.ToolSleep
)

// MaxSleep is the longest sleep the sleep tool accepts.
const MaxSleep = time.Hour

type builtin struct {
	handler Handler
	catalog *contracts.CatalogTool
}

func builtins() map[string]builtin {
	return map[string]builtin{
		ToolNoop: {HandlerFunc(noop), &contracts.CatalogTool{
			Label:        "No-op",
			Description:  "Return the input unchanged (diagnostics).",
			InputSchema:  json.RawMessage(`{}`),
			OutputSchema: json.RawMessage(`{}`),
		}},
		ToolSleep: {HandlerFunc(sleep), &contracts.CatalogTool{
			Label:        "Sleep",
			Description:  "Wait the given milliseconds, honouring cancellation (diagnostics).",
			InputSchema:  json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer","minimum":0,"maximum":3600000}},"required":["ms"],"additionalProperties":false}`),
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"slept_ms":{"type":"integer"}},"required":["slept_ms"],"additionalProperties":false}`),
		}},
	}
}

// noop returns its input as its result.
func noop(_ context.Context, job *contracts.Job) (json.RawMessage, error) {
	return job.Input, nil
}

// SleepInput is the input of the sleep tool.
type SleepInput = contracts.SleepInput

// sleep waits {ms} milliseconds, honouring cancellation; it is for tests of
// heartbeats, cancellation and shutdown.
func sleep(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
	var in SleepInput
	if len(job.Input) > 0 {
		if err := json.Unmarshal(job.Input, &in); err != nil {
			return nil, Permanent(contracts.Errorf(contracts.CodeInvalidInput, "sleep: input must be {\"ms\": <milliseconds>}: %v", err))
		}
	}
	if in.Ms < 0 || in.Ms > MaxSleep.Milliseconds() {
		return nil, Permanent(contracts.Errorf(contracts.CodeInvalidInput, "sleep: ms %d out of range [0, %d]", in.Ms, MaxSleep.Milliseconds()))
	}
	t := time.NewTimer(time.Duration(in.Ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return json.Marshal(map[string]int64{"slept_ms": in.Ms})
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
