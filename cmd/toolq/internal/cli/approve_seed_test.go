package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// `toolq approve ID` without --seed-file signs with the dev approver seed of
// the directory `toolq dev` ran in, from any directory below it; with no
// seed anywhere it says what to give.
//
//nolint:paralleltest // it changes the working directory, which the whole process shares
func TestApproveFindsTheDevSeed(t *testing.T) {
	url, seed := startExecBus(t)
	root := t.TempDir()
	raw, err := os.ReadFile(seed) //nolint:gosec // G304: the test's own file
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(root, ".toolq", "dev"), 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(root, devSeedPath), raw, 0o600)) //nolint:gosec // G703: a test directory
	below := filepath.Join(root, "src", "deep")
	require.NoError(t, os.MkdirAll(below, 0o750))
	t.Chdir(below)
	t.Setenv("TOOLQ_APPROVER_SEED_FILE", "")

	id := pendingID(t, url, "uname -s")
	code, out, errOut := run(t, "--nats", url, "approve", id, "--yes", "--wait")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "signing with the dev approver seed "+filepath.Join(root, devSeedPath))
	require.Contains(t, out, string(contracts.StatusCompleted))

	t.Chdir(t.TempDir())
	id = pendingID(t, url, "uname -r")
	code, _, errOut = run(t, "--nats", url, "approve", id, "--yes")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "no approver seed: give --seed-file")
}
