package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/toolq/toolq/contracts"
)

// Names of the diagnostic tools every worker has unless DisableBuiltins is set.
const (
	ToolNoop  = "noop"
	ToolSleep = "sleep"
)

// MaxSleep is the longest sleep the sleep tool accepts.
const MaxSleep = time.Hour

func builtins() map[string]Handler {
	return map[string]Handler{ToolNoop: HandlerFunc(noop), ToolSleep: HandlerFunc(sleep)}
}

// noop returns its input as its result.
func noop(_ context.Context, job *contracts.Job) (json.RawMessage, error) {
	return job.Input, nil
}

// SleepInput is the input of the sleep tool.
type SleepInput struct {
	Ms int64 `json:"ms"`
}

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
