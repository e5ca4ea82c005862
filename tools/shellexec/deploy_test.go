package shellexec_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/tools/shellexec"
	"github.com/toolq/toolq/worker"
)

// TestDeployPermissions runs the approval life cycle on a server configured
// with deploy/nats/approvers.conf: the worker and the agent log in with
// passwords, the approver with its nkey. Only the approver may publish a
// decision, and the approver cannot write approval records.
func TestDeployPermissions(t *testing.T) {
	t.Parallel()
	conf, err := os.ReadFile(filepath.Join("..", "..", "deploy", "nats", "approvers.conf"))
	require.NoError(t, err)
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	text := strings.NewReplacer(
		"$TOOLQ_WORKER_PASSWORD", `"worker-secret"`, "$TOOLQ_AGENT_PASSWORD", `"agent-secret"`,
		"UB67T6C5ATSMBT4ZJ7AELG52PIQ2DUFW54YI6CPMPCCKGBAR6CWGXM3Z", pub,
	).Replace(string(conf))
	dir := t.TempDir()
	path := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600)) //nolint:gosec // G703: path is a fixed name in the test's temp dir
	opts, err := server.ProcessConfigFile(path)
	require.NoError(t, err)
	opts.Host, opts.Port, opts.JetStream, opts.StoreDir, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, filepath.Join(dir, "js"), true, true
	ns, err := server.NewServer(opts)
	require.NoError(t, err)
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	require.True(t, ns.ReadyForConnections(10*time.Second))
	connect := func(o ...nats.Option) *nats.Conn {
		o = append(o, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		nc, err := nats.Connect(ns.ClientURL(), o...)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}

	wc := connect(nats.UserInfo("worker", "worker-secret"))
	w, err := worker.New(wc, &worker.Config{Name: "w1", Logger: quiet, StopTimeout: 5 * time.Second})
	require.NoError(t, err)
	_, err = shellexec.Register(w, wc, &shellexec.Config{
		Policy:    shell.Policy{Security: shell.SecurityAllowlist, Ask: shell.AskOnMiss},
		Runner:    shell.RunnerConfig{ScratchDir: t.TempDir()},
		Approvers: []string{pub}, Logger: quiet,
	})
	require.NoError(t, err)
	ctx := testutil.Context(t, 30*time.Second)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(sctx))
	})

	agent, err := producer.New(connect(nats.UserInfo("agent", "agent-secret")), &producer.Config{Session: "agent", Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(agent.Close)
	job, err := agent.Submit(ctx, shellexec.ToolExec, json.RawMessage(`{"command":"seq 2"}`), nil)
	require.NoError(t, err)
	ev, err := agent.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
	require.NoError(t, err)
	require.Equal(t, contracts.StatusApprovalPending, ev.Data.Status)

	// The agent can neither read the approval record (env overrides) nor
	// decide it.
	short0, cancel0 := context.WithTimeout(ctx, time.Second)
	defer cancel0()
	_, err = agent.Approval(short0, job.ID)
	require.Error(t, err)
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	forged := &contracts.ExecDecision{ApprovalID: job.ID, Verdict: contracts.ExecApprove, Approver: pub, Signature: "forged"}
	_, err = agent.Decide(short, forged, nil)
	require.Error(t, err, "agents must not publish decisions")

	anc := connect(nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }))
	approver, err := producer.New(anc, &producer.Config{Session: "approvals", Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(approver.Close)
	// The approver cannot rewrite the record it decides on.
	ajs, err := jetstream.New(anc)
	require.NoError(t, err)
	short2, cancel2 := context.WithTimeout(ctx, time.Second)
	defer cancel2()
	_, err = ajs.Publish(short2, contracts.KVSubject(contracts.Subjects{}.ApprovalsBucket(), job.ID), []byte(`{}`))
	require.Error(t, err)

	dj, _, err := shellexec.Decide(ctx, approver, job.ID, shell.Approve, seed, &shellexec.DecideOpts{Submit: &producer.SubmitOpts{Progress: true}})
	require.NoError(t, err)
	var got *contracts.Event
	require.NoError(t, approver.ReadEvents(ctx, dj.Session, &producer.ReadOpts{Follow: true, JobID: dj.ID}, func(e *contracts.Event) error {
		if e.Data.Status == contracts.StatusProgress || e.Data.Status.Terminal() {
			got = e
			return producer.ErrStop
		}
		return nil
	}))
	require.Equal(t, contracts.StatusProgress, got.Data.Status, "%v", got.Data.Error)
	ev, err = agent.Await(ctx, job.Session, job.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	require.Contains(t, string(ev.Data.Result), `1\n2\n`)
}
