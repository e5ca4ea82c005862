// Package typescript holds the test of the TypeScript agent (agent.mjs):
// no Go of its own.
package typescript

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/examples/internal/exampletest"
	"github.com/toolq/toolq/internal/testutil"
)

// TestAgent: `npm ci` installs the agent's pinned dependencies, and node
// runs it against an in-process server with a worker: its code-mode run
// completes, its command waits for approval, is approved with the agent's
// signature and runs; a second run denies and the command does not run. A
// worker that does not trust the agent's key refuses its decision.
func TestAgent(t *testing.T) {
	t.Parallel()
	// The suite needs npm (it fetches the engine too) and bubblewrap, as
	// the README says and .ci/run installs: their absence fails, it does
	// not skip.
	npm, err := exec.LookPath("npm")
	require.NoError(t, err, "npm is not installed")
	node, err := exec.LookPath("node")
	require.NoError(t, err, "npm without node")
	_, err = exec.LookPath("bwrap")
	require.NoError(t, err, "bubblewrap (bwrap) is not installed: exec runs its commands in it")
	ctx := testutil.Context(t, 5*time.Minute)
	install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
	install.Env = append(os.Environ(), "npm_config_update_notifier=false")
	out, err := install.CombinedOutput()
	require.NoError(t, err, "npm ci: %s", out)

	approver, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := approver.Seed()
	require.NoError(t, err)
	pub, err := approver.PublicKey()
	require.NoError(t, err)
	seedFile := filepath.Join(t.TempDir(), "approver.seed")
	require.NoError(t, os.WriteFile(seedFile, seed, 0o600))
	srv := testutil.StartJetStream(t)
	obs := &exampletest.Deliveries{}
	exampletest.StartWorker(t, srv.Connect(t), &exampletest.Config{Exec: true, Approvers: []string{pub}, Observer: obs})

	agent := func(t *testing.T, ctx context.Context, args ...string) (string, error) {
		t.Helper()
		cmd := exec.CommandContext(ctx, node, append([]string{"agent.mjs", "--nats", srv.ClientURL(), "--seed-file", seedFile}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		t.Logf("stderr:\n%s", stderr.String())
		return stdout.String(), err
	}

	got, err := agent(t, ctx)
	require.NoError(t, err, got)
	require.Contains(t, got, `code mode: completed {"sum":31,"max":9}`)
	require.Contains(t, got, "approval pending: uname -s")
	require.Contains(t, got, "decision: approved")
	require.Contains(t, got, `exec: completed exit 0 stdout "Linux"`)
	require.Equal(t, int64(1), obs.Of(contracts.ToolExecDecide))

	got, err = agent(t, ctx, "--verdict", "deny", "--command", "uname -r", "--session", "ts-deny")
	require.NoError(t, err, got)
	require.Contains(t, got, "decision: denied")
	require.Contains(t, got, "exec: not run (denied:")

	// A key the worker does not trust: the decision is refused, and the
	// agent says so.
	other, err := nkeys.CreateUser()
	require.NoError(t, err)
	otherSeed, err := other.Seed()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(seedFile, otherSeed, 0o600))
	got, err = agent(t, ctx, "--session", "ts-untrusted")
	require.Error(t, err)
	require.Contains(t, got, "approval pending")
	require.Contains(t, got, "decision refused: ")
	require.Contains(t, got, "unknown approver")
	require.NotContains(t, got, "exec: completed")
}
