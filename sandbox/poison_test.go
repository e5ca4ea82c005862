package sandbox_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/sandbox"
)

// TestHugeErrorIsCut: a thrown error's text is cut to
// CodeModeMaxErrorBytes, so a failure is never larger than a message.
func TestHugeErrorIsCut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, code := range []string{
		`throw new Error("y".repeat(1.2e7))`,
		`throw "z".repeat(3e6)`,
		`await null; throw new Error("é".repeat(1e6))`,
	} {
		out := b.exec(t, code, sandbox.Limits{})
		require.Equal(t, sandbox.StatusFailed, out.Result.Status)
		require.LessOrEqual(t, len(out.Result.Error), contracts.CodeModeMaxErrorBytes)
		require.Contains(t, out.Result.Error, "bytes cut")
		data, err := json.Marshal(out.Result)
		require.NoError(t, err)
		require.Less(t, len(data), 8<<10)
	}
}

// TestEmptyOutputItemsCount: empty items are not free — each costs bytes
// against maxOutputBytes, and their number is capped by maxOutputItems.
func TestEmptyOutputItemsCount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := b.exec(t, `for (;;) text("")`, sandbox.Limits{})
	requireFailed(t, out, "output_limit_exceeded", "maxOutputItems (1000")
	require.Len(t, out.Result.Output, 1000)

	out = b.exec(t, `for (;;) json(null)`, sandbox.Limits{MaxOutputItems: 100000, MaxOutputBytes: 4096})
	requireFailed(t, out, "output_limit_exceeded", "maxOutputBytes (4096)")
	require.Less(t, len(out.Result.Output), 4096/contracts.CodeModeOutputItemBytes)

	out = b.exec(t, `for (let i = 0; i < 10; i++) text(""); return 1`, sandbox.Limits{MaxOutputItems: 10})
	requireCompleted(t, out, `1`)
}

// TestTotalCPUBudget: timeoutMs bounds one slice; maxTotalCpuMs bounds the
// run over exec and all its resumes.
func TestTotalCPUBudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Slices of 100 ms against a budget of 1 s: at least three slices fit
	// even when a loaded machine (-race, parallel tests) stretches each to
	// three times its length; the last one is cut by the budget, well
	// before the slice's own 2 s timeout.
	code := `for (;;) { const end = Date.now() + 100; while (Date.now() < end) {} await yield_control(); }`
	limits := sandbox.Limits{TimeoutMs: 2000, MaxTotalCPUMs: 1000}
	out := b.exec(t, code, limits)
	for i := 0; i < 40 && out.Result.Status == sandbox.StatusWaiting; i++ {
		out = b.resume(t, out.Snapshot)
	}
	requireFailed(t, out, "timeout", "maxTotalCpuMs")
	require.GreaterOrEqual(t, out.Result.Telemetry.Resumes, 2)
	require.Less(t, out.Result.Telemetry.DurationMs, 1900.0)
}
