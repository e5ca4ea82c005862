package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/examples/internal/exampletest"
	"github.com/toolq/toolq/internal/testutil"
)

// TestChat: a scripted user runs three commands through the bot. `ls` is
// on the allowlist and runs at once; `uname -s` waits for approval, the
// user approves, the signed decision is accepted and the run completes with
// the command's output; `uname -r` is denied and the run says so. A
// decision signed by a key the worker does not trust is refused.
func TestChat(t *testing.T) {
	t.Parallel()
	// bubblewrap is part of the suite's needs (README, .ci/run): missing, the test fails.
	_, err := exec.LookPath("bwrap")
	require.NoError(t, err, "bubblewrap (bwrap) is not installed: exec runs its commands in it")
	approver, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := approver.Seed()
	require.NoError(t, err)
	pub, err := approver.PublicKey()
	require.NoError(t, err)
	srv := testutil.StartJetStream(t)
	exampletest.StartWorker(t, srv.Connect(t), &exampletest.Config{Exec: true, Approvers: []string{pub}})

	in := strings.NewReader("run ls /\nrun uname -s\ny\nhello\nrun uname -r\nn\nquit\n")
	var out bytes.Buffer
	require.NoError(t, Run(testutil.Context(t, time.Minute), Config{NATS: srv.ClientURL(), Session: "chat-1", Seed: seed, In: in, Out: &out}))
	got := out.String()
	t.Log(got)

	turns := strings.Split(got, "you> ")
	require.Len(t, turns, 6, "five prompts")
	ls, approved, chatter, denied := turns[1], turns[2], turns[3], turns[4]
	require.NotContains(t, ls, "approve?", "ls is on the allowlist")
	require.Contains(t, ls, "\n     usr\n", "the listing of the sandbox's /")
	require.Contains(t, approved, "this needs your approval: uname -s")
	require.Contains(t, approved, "approved; the command runs now")
	require.Contains(t, approved, "bot: Linux\n")
	require.Contains(t, chatter, "I only run commands")
	require.Contains(t, denied, "this needs your approval: uname -r")
	require.Contains(t, denied, "denied; the command will not run")
	require.Contains(t, denied, "the command was not run")
	require.Contains(t, turns[5], "bye")

	// Another key signs: the worker trusts only its approvers.
	other, err := nkeys.CreateUser()
	require.NoError(t, err)
	otherSeed, err := other.Seed()
	require.NoError(t, err)
	out.Reset()
	in = strings.NewReader("run uname -m\ny\nquit\n")
	require.NoError(t, Run(testutil.Context(t, time.Minute), Config{NATS: srv.ClientURL(), Session: "chat-2", Seed: otherSeed, In: in, Out: &out}))
	got = out.String()
	t.Log(got)
	require.Contains(t, got, "this needs your approval: uname -m")
	require.Contains(t, got, "the worker refused the decision")
	require.Contains(t, got, "the run failed: cancelled")
	require.NotContains(t, got, "x86_64")
	require.NotContains(t, got, "aarch64")
}
