package codemode_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// TestPoisonFailuresEndAtOnce: a run whose failure or output would make an
// event larger than a message fails at once, on its first attempt, with a
// cut error or output_limit_exceeded — it is never retried.
func TestPoisonFailuresEndAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "A", nil, nil)
	tests := []struct {
		name, code string
		wantCode   contracts.ErrorCode
		extra      map[string]any
	}{
		{"huge error", `throw new Error("y".repeat(1.2e7))`, "", nil},
		{"empty items", `for (;;) text("")`, contracts.CodeOutputLimitExceeded, nil},
		{"huge waiting result", `await tools.callValue("toolq:core:noop", {x: "z".repeat(2e6)})`, contracts.CodeOutputLimitExceeded,
			map[string]any{"autoResume": true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			job := b.exec(t, tt.code, tt.extra, nil)
			ev := b.await(t, job, true)
			require.Equal(t, contracts.StatusFailed, ev.Data.Status)
			require.Equal(t, 1, ev.Data.Attempt)
			r := result(t, ev.Data.Error.Details)
			require.Equal(t, string(tt.wantCode), r.Code, r.Error)
			require.LessOrEqual(t, len(r.Error), contracts.CodeModeMaxErrorBytes)
		})
	}
}
