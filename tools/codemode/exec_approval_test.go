package codemode_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/tools/codemode"
	"github.com/toolq/toolq/tools/shellexec"
	"github.com/toolq/toolq/worker"
)

func registerShellExec(t *testing.T, b *bundle, approver string) func(w *worker.Worker) {
	t.Helper()
	return func(w *worker.Worker) {
		_, err := shellexec.Register(w, b.srv.Connect(t), &shellexec.Config{
			Policy: shell.Policy{
				Security: shell.SecurityAllowlist, Ask: shell.AskOnMiss,
				Allowlist: []string{"/usr/bin/echo"},
			},
			Runner:    shell.RunnerConfig{ScratchDir: t.TempDir()},
			Approvers: []string{approver},
			Logger:    quiet,
		})
		require.NoError(t, err)
	}
}

// TestShellExecOffByDefault: the code-mode contract never exposes the plain
// shell exec to guest code. A worker enables it explicitly, and then only
// runs whose tools name it see it.
func TestShellExecOffByDefault(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	probe := `const ids = ALL_TOOLS.map((t) => t.id);
		let called;
		try { await tools.call("toolq:core:exec", {command: "echo hi"}); called = "called"; } catch (e) { called = e.message; }
		return {exec: ids.includes("toolq:core:exec"), noop: ids.includes("toolq:core:noop"), called};`
	type seen struct {
		Exec   bool   `json:"exec"`
		Noop   bool   `json:"noop"`
		Called string `json:"called"`
	}
	run := func(t *testing.T, b *bundle, extra map[string]any) seen {
		t.Helper()
		ev := b.await(t, b.exec(t, probe, extra, nil), false)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
		var s seen
		require.NoError(t, json.Unmarshal(result(t, ev.Data.Result).Value, &s))
		return s
	}

	t.Run("off", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.startWorker(t, "A", nil, registerShellExec(t, b, pub))
		for _, extra := range []map[string]any{nil, {"tools": []string{"toolq:core:exec", "toolq:core:noop"}}} {
			s := run(t, b, extra)
			require.False(t, s.Exec)
			require.True(t, s.Noop)
			require.Contains(t, s.Called, "not in this run's catalog")
		}
	})
	t.Run("on, but the run does not name it", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.startWorker(t, "A", &codemode.Config{ShellExec: true}, registerShellExec(t, b, pub))
		s := run(t, b, nil)
		require.False(t, s.Exec)
		require.True(t, s.Noop)
		require.Contains(t, s.Called, "not in this run's catalog")
	})
	t.Run("on and named", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.startWorker(t, "A", &codemode.Config{ShellExec: true}, registerShellExec(t, b, pub))
		s := run(t, b, map[string]any{"tools": []string{"toolq:core:exec"}, "autoResume": true})
		require.True(t, s.Exec)
		require.False(t, s.Noop)
		require.Equal(t, "called", s.Called)
	})
}

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
	b.startWorker(t, "A", &codemode.Config{ShellExec: true}, registerShellExec(t, b, pub))
	job := b.exec(t, `
		const r = await tools.callValue("toolq:core:exec", {command: "uname -s"});
		return r.stdout.trim();`, map[string]any{"autoResume": true, "tools": []string{"toolq:core:exec"}}, nil)
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
	require.Equal(t, contracts.StatusCompleted, final.Data.Status, "%s %+v", final.Data.Result, final.Data.Error)
	require.JSONEq(t, `"Linux"`, string(result(t, final.Data.Result).Value))

	// restartSafe runs never reach it.
	safe := b.exec(t, `try { await tools.callValue("toolq:core:exec", {command: "echo hi"}); return "ran"; } catch (e) { return e.message; }`,
		map[string]any{"restartSafe": true, "tools": []string{"toolq:core:exec"}}, nil)
	ev = b.await(t, safe, false)
	require.Contains(t, string(result(t, ev.Data.Result).Value), "restartSafe")
}
