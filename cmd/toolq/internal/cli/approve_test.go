package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/tools/shellexec"
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
	return pendingInput(t, url, map[string]any{"command": command})
}

// pendingInput is pendingID with a whole exec input.
func pendingInput(t *testing.T, url string, input map[string]any) string {
	t.Helper()
	in, err := json.Marshal(input)
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
	code, out, errOut = run(t, "--nats", url, "approve", id, "--seed-file", seed, "--always", "--wait", "--yes")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "uname -s")
	require.Contains(t, errOut, "--always: always allow exactly (the same binary with the same arguments):\n    '/usr/bin/uname' -s")
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
	code, _, errOut = run(t, "--nats", url, "approve", pendingID(t, url, "id -g"), "--seed-file", stranger, "--yes")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "unknown approver")
	code, _, errOut = run(t, "--nats", url, "approve", "no-such-approval", "--seed-file", seed, "--yes")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "unknown or expired")
}

// approvalStatus reads the approval record's status.
func approvalStatus(t *testing.T, url, id string) (status, hash string) {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	defer nc.Close()
	p, err := producer.New(nc, &producer.Config{Session: "check", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer p.Close()
	rec, err := p.Approval(testutil.Context(t, 5*time.Second), id)
	require.NoError(t, err)
	return rec.Status, rec.Approval.Hash
}

// TestApproveShowsThePlanBeforeSigning: approve prints the whole plan, env
// included, and signs nothing without a confirmation: no terminal and no
// --yes, a wrong --expect-hash, or an answer other than y on a terminal.
func TestApproveShowsThePlanBeforeSigning(t *testing.T) {
	t.Parallel()
	url, seed := startExecBus(t)
	id := pendingInput(t, url, map[string]any{"command": "uname -s", "env": map[string]string{"TZ": "Europe/Stockholm\x1b[2K"}, "timeout": 9})
	_, hash := approvalStatus(t, url, id)

	code, _, errOut := run(t, "--nats", url, "approve", id, "--seed-file", seed)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "no terminal to confirm on")
	for _, want := range []string{"/usr/bin/uname -s", `TZ="Europe/Stockholm\x1b[2K"`, "timeout:  9s", "host:     sandbox", "hash:     " + hash} {
		require.Contains(t, errOut, want)
	}
	st, _ := approvalStatus(t, url, id)
	require.Equal(t, shellexec.StatusPending, st, "nothing signed without a confirmation")

	code, _, errOut = run(t, "--nats", url, "approve", id, "--seed-file", seed, "--expect-hash", strings.Repeat("0", 64))
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "not the expected")
	st, _ = approvalStatus(t, url, id)
	require.Equal(t, shellexec.StatusPending, st)

	// On a terminal, anything but y refuses; y approves.
	code, _, errOut = runTTY(t, "n\n", "--nats", url, "approve", id, "--seed-file", seed)
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "Approve and sign this plan? [y/N]")
	require.Contains(t, errOut, "not confirmed")
	st, _ = approvalStatus(t, url, id)
	require.Equal(t, shellexec.StatusPending, st)
	code, out, errOut := runTTY(t, "y\n", "--nats", url, "approve", id, "--seed-file", seed)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "approved "+id)

	// A script approves by hash without a prompt.
	id = pendingID(t, url, "uname -m")
	_, hash = approvalStatus(t, url, id)
	code, out, errOut = run(t, "--nats", url, "approve", id, "--seed-file", seed, "--expect-hash", hash)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "approved "+id)
}

// runTTY runs the CLI with a pseudo-terminal as stdin that answers answer.
func runTTY(t *testing.T, answer string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	defer ptmx.Close()
	require.NoError(t, unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	tty, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	defer tty.Close()
	_, err = ptmx.WriteString(answer)
	require.NoError(t, err)
	var out, errb bytes.Buffer
	code = mainIO(args, tty, &out, &errb)
	return code, out.String(), errb.String()
}
