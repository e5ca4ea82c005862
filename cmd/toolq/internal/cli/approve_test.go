package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/shell"
)

// startExecBus starts a worker with the default exec policy that trusts the
// approver seed it creates; it returns the URL and the contract file.
func startExecBus(t *testing.T) (url, seedFile string) {
	t.Helper()
	srv := testutil.StartJetStream(t)
	seedFile = filepath.Join(t.TempDir(), "dev", "approver.seed")
	g := &globals{prefix: contracts.DefaultPrefix, log: slog.New(slog.DiscardHandler), stdout: io.Discard, stderr: io.Discard}
	f := &workerFlags{concurrency: 8, replicas: 1, stopTimeout: time.Second, noCodeMode: true}
	f.exec.approverSeed = seedFile
	n, err := newNode(testutil.Context(t, 30*time.Second), g, srv.Connect(t), f)
	require.NoError(t, err)
	require.NotNil(t, n.exec)
	require.NoError(t, n.start(testutil.Context(t, 30*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, n.stop(ctx))
	})
	info, err := os.Stat(seedFile)
	require.NoError(t, err, "the approver seed is created")
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	return srv.ClientURL(), seedFile
}

// pendingID submits command as an exec job and returns its id once it waits
// for approval.
func pendingID(t *testing.T, url, command string) string {
	t.Helper()
	in, err := json.Marshal(map[string]string{"command": command})
	require.NoError(t, err)
	code, out, errOut := run(t, "--nats", url, "submit", "--tool", "exec", "--input", string(in), "--session", "agent")
	require.Equal(t, 0, code, errOut)
	id := strings.TrimSpace(out)
	require.Eventually(t, func() bool {
		_, out, _ := run(t, "--nats", url, "events", "--session", "agent", "--job", id)
		return strings.Contains(out, string(contracts.StatusApprovalPending))
	}, 10*time.Second, 20*time.Millisecond)
	return id
}

func TestApproveAndDenyCommands(t *testing.T) {
	t.Parallel()
	url, seed := startExecBus(t)

	// Allowlisted: runs at once.
	code, out, errOut := run(t, "--nats", url, "submit", "--tool", "exec", "--input", `{"command":"echo hi"}`, "--wait")
	require.Equal(t, 0, code, errOut)
	var ev contracts.Event
	require.NoError(t, json.Unmarshal([]byte(out), &ev))
	var res shell.Result
	require.NoError(t, json.Unmarshal(ev.Data.Result, &res))
	require.Equal(t, "hi\n", res.Stdout)

	// Not allowlisted: waits; approve --always --wait runs it.
	id := pendingID(t, url, "uname -s")
	code, out, errOut = run(t, "--nats", url, "approve", id, "--seed-file", seed, "--always", "--wait")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "uname -s")
	require.NoError(t, json.Unmarshal([]byte(out), &ev))
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	require.NoError(t, json.Unmarshal(ev.Data.Result, &res))
	require.Equal(t, "Linux\n", res.Stdout)

	// A second decision does nothing and says so.
	code, _, errOut = run(t, "--nats", url, "deny", id, "--seed-file", seed)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "already approved")

	// --always allowlisted exactly "uname -s" (not uname with other
	// arguments); another command is denied by a person.
	code, _, errOut = run(t, "--nats", url, "submit", "--tool", "exec", "--input", `{"command":"uname -s"}`, "--wait")
	require.Equal(t, 0, code, errOut)
	pendingID(t, url, "uname -r")
	id = pendingID(t, url, "id -u")
	code, out, errOut = run(t, "--nats", url, "deny", id, "--seed-file", seed, "--reason", "no")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "denied "+id)
	code, out, errOut = run(t, "--nats", url, "--json", "events", "--session", "agent", "--job", id)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "denied by approver: no")

	// A stranger's key is refused; so is an unknown approval.
	stranger := filepath.Join(t.TempDir(), "stranger.seed")
	_, err := ensureSeed(stranger)
	require.NoError(t, err)
	code, _, errOut = run(t, "--nats", url, "approve", pendingID(t, url, "id -g"), "--seed-file", stranger)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "unknown approver")
	code, _, errOut = run(t, "--nats", url, "approve", "no-such-approval", "--seed-file", seed)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "unknown or expired")
}
