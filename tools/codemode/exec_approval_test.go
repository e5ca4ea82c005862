package codemode_test

import (
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/tools/shellexec"
	"github.com/toolq/toolq/worker"
)

// Guest code calls the shell exec tool; the command needs a person's
// approval, so the nested call parks; the run waits in NATS; the approval
// arrives, the command runs, and the run resumes with its output.
func TestNestedExecWaitsForApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	b.startWorker(t, "A", nil, func(w *worker.Worker) {
		_, err := shellexec.Register(w, b.srv.Connect(t), &shellexec.Config{
			Policy: shell.Policy{
				Security: shell.SecurityAllowlist, Ask: shell.AskOnMiss,
				Allowlist: []string{"/usr/bin/echo"},
			},
			Runner:    shell.RunnerConfig{ScratchDir: t.TempDir()},
			Approvers: []string{pub},
			Logger:    quiet,
		})
		require.NoError(t, err)
	})
	job := b.exec(t, `
		const r = await tools.callValue("toolq:core:exec", {command: "uname -s"});
		return r.stdout.trim();`, map[string]any{"autoResume": true}, nil)
	require.Equal(t, contracts.StatusWaiting, b.await(t, job, true).Data.Status)

	// The nested exec job is parked for approval; its id is the approval id.
	nested := job.ID + "-call_1"
	ctx := testutil.Context(t, 30*time.Second)
	ev, err := b.prod.Await(ctx, job.Session, nested, &producer.AwaitOpts{Parked: true})
	require.NoError(t, err)
	require.Equal(t, contracts.StatusApprovalPending, ev.Data.Status)
	require.Equal(t, job.ID, ev.Data.Parent.RunID)
	_, _, err = shellexec.Decide(ctx, b.prod, nested, shell.Approve, seed, &shellexec.DecideOpts{Submit: &producer.SubmitOpts{Session: job.Session}})
	require.NoError(t, err)

	final := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, final.Data.Status, string(final.Data.Result))
	require.JSONEq(t, `"Linux"`, string(result(t, final.Data.Result).Value))

	// restartSafe runs never reach it.
	safe := b.exec(t, `try { await tools.callValue("toolq:core:exec", {command: "echo hi"}); return "ran"; } catch (e) { return e.message; }`,
		map[string]any{"restartSafe": true}, nil)
	ev = b.await(t, safe, false)
	require.Contains(t, string(result(t, ev.Data.Result).Value), "restartSafe")
}
