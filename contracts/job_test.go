package contracts_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

func TestParentContinuation(t *testing.T) {
	t.Parallel()
	// A parent names its continuation; one from an older producer has none
	// and reports to code mode, as every nested call did before.
	require.Equal(t, "batch.result", (&contracts.Parent{RunID: "r", CallID: "c", Tool: "batch.result"}).Continuation())
	require.Equal(t, contracts.ToolCodeModeResult, (&contracts.Parent{RunID: "r", CallID: "c"}).Continuation())

	job := &contracts.Job{ID: "j", Tool: "noop", Session: "s", Parent: &contracts.Parent{RunID: "r", CallID: "c", Tool: "no..tool"}}
	require.ErrorIs(t, job.Validate(), contracts.ErrInvalidInput)
	job.Parent.Tool = "batch.result"
	require.NoError(t, job.Validate())
}
