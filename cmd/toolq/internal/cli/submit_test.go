package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// A `submit --wait` whose job parks for a person says so at once, and a wait
// that runs out says the job is still there and how to follow it.
func TestSubmitWaitTellsWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	url, _ := startExecBus(t)

	code, _, errOut := run(t, "--nats", url, "--timeout", "2s", "submit", "--tool", "exec",
		"--input", `{"command":"uname -a"}`, "--session", "agent", "--wait")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "waiting for approval: ")
	require.Contains(t, errOut, "(approve with `toolq approve ")
	require.Contains(t, errOut, "is still "+string(contracts.StatusApprovalPending)+" after --timeout 2s")
	require.Contains(t, errOut, "toolq events --session agent --job ")
	require.NotContains(t, errOut, "context deadline exceeded")
	require.Equal(t, 1, strings.Count(errOut, "waiting for approval"))
}
