package shellexec_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/tools/shellexec"
	"github.com/toolq/toolq/worker"
)

var quiet = slog.New(slog.DiscardHandler)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"))
}

type bundle struct {
	srv      *testutil.Server
	w        *worker.Worker
	se       *shellexec.ShellExec
	prod     *producer.Producer
	js       jetstream.JetStream
	seed     []byte // the trusted approver
	approver string
	work     string
}

func newApprover(t *testing.T) ([]byte, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	return seed, pub
}

// setup starts a server and a worker with exec. The default policy is the
// dev one: allowlist (echo) with ask on-miss, sandbox host.
func setup(t *testing.T, mutate func(c *shellexec.Config)) *bundle {
	t.Helper()
	srv := testutil.StartJetStream(t)
	seed, pub := newApprover(t)
	work := filepath.Join(t.TempDir(), "work")
	require.NoError(t, os.Mkdir(work, 0o750))
	cfg := shellexec.Config{
		Policy: shell.Policy{
			Security: shell.SecurityAllowlist, Ask: shell.AskOnMiss,
			Allowlist: []string{"/usr/bin/echo"}, SafeBins: []string{"tr"},
			WorkdirRoots: []string{filepath.Dir(work)},
		},
		Runner:    shell.RunnerConfig{ScratchDir: t.TempDir()},
		Approvers: []string{pub},
		Logger:    quiet,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	nc := srv.Connect(t)
	w, err := worker.New(nc, &worker.Config{Name: "w1", Logger: quiet, StopTimeout: 5 * time.Second})
	require.NoError(t, err)
	se, err := shellexec.Register(w, nc, &cfg)
	require.NoError(t, err)
	ctx := testutil.Context(t, 20*time.Second)
	require.NoError(t, w.Start(ctx)) // starts the exec tool, its extension
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(sctx))
		select {
		case <-se.Stopped():
		default:
			t.Error("the worker's Stop did not stop the exec tool")
		}
	})
	pc := srv.Connect(t)
	prod, err := producer.New(pc, &producer.Config{Session: "s1", Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	return &bundle{srv: srv, w: w, se: se, prod: prod, js: testutil.JetStream(t, pc), seed: seed, approver: pub, work: work}
}

func (b *bundle) exec(t *testing.T, in map[string]any) *contracts.Job {
	t.Helper()
	data, err := json.Marshal(in)
	require.NoError(t, err)
	job, err := b.prod.Submit(testutil.Context(t, 5*time.Second), shellexec.ToolExec, data, nil)
	require.NoError(t, err)
	return job
}

func (b *bundle) await(t *testing.T, session, jobID string, parked bool) *contracts.Event {
	t.Helper()
	ev, err := b.prod.Await(testutil.Context(t, 30*time.Second), session, jobID, &producer.AwaitOpts{Parked: parked})
	require.NoError(t, err)
	return ev
}

func (b *bundle) events(t *testing.T, session, jobID string) []*contracts.Event {
	t.Helper()
	var out []*contracts.Event
	require.NoError(t, b.prod.ReadEvents(testutil.Context(t, 10*time.Second), session, &producer.ReadOpts{JobID: jobID}, func(ev *contracts.Event) error {
		out = append(out, ev)
		return nil
	}))
	return out
}

func statuses(evs []*contracts.Event) []contracts.Status {
	out := make([]contracts.Status, len(evs))
	for i, e := range evs {
		out[i] = e.Data.Status
	}
	return out
}

// pending submits a command that needs approval and returns its job and
// approval_pending result.
func (b *bundle) pending(t *testing.T, in map[string]any) (*contracts.Job, shellexec.PendingResult) {
	t.Helper()
	job := b.exec(t, in)
	ev := b.await(t, job.Session, job.ID, true)
	require.Equal(t, contracts.StatusApprovalPending, ev.Data.Status, "%s %v", ev.Data.Result, ev.Data.Error)
	var p shellexec.PendingResult
	require.NoError(t, json.Unmarshal(ev.Data.Result, &p))
	return job, p
}

// decide submits a decision signed with seed and awaits the decide job.
func (b *bundle) decide(t *testing.T, id string, v shell.Verdict, seed []byte, opts *shellexec.DecideOpts) *contracts.Event {
	t.Helper()
	job, _, err := shellexec.Decide(testutil.Context(t, 5*time.Second), b.prod, id, v, seed, opts)
	require.NoError(t, err)
	return b.await(t, job.Session, job.ID, false)
}

// submitDecision submits d as it is, bypassing the producer's own checks,
// so the worker's refusals can be tested.
func (b *bundle) submitDecision(t *testing.T, d shell.ApprovalDecision) *contracts.Event {
	t.Helper()
	raw, err := json.Marshal(shellexec.DecideInput{Decision: d})
	require.NoError(t, err)
	job, err := b.prod.Submit(testutil.Context(t, 5*time.Second), shellexec.ToolDecide, raw, nil)
	require.NoError(t, err)
	return b.await(t, job.Session, job.ID, false)
}

func decideResult(t *testing.T, ev *contracts.Event) shellexec.DecideResult {
	t.Helper()
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	var r shellexec.DecideResult
	require.NoError(t, json.Unmarshal(ev.Data.Result, &r))
	return r
}

func runResult(t *testing.T, ev *contracts.Event) shell.Result {
	t.Helper()
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%s %v", ev.Data.Result, ev.Data.Error)
	var r shell.Result
	require.NoError(t, json.Unmarshal(ev.Data.Result, &r))
	return r
}

// startSecondWorker starts another exec worker ("w2") with the bundle's
// approver, stopped when the test ends: the one that takes over after the
// bundle's own worker was stopped.
func (b *bundle) startSecondWorker(ctx context.Context, t *testing.T) {
	t.Helper()
	nc := b.srv.Connect(t)
	w2, err := worker.New(nc, &worker.Config{Name: "w2", Logger: quiet, StopTimeout: 5 * time.Second})
	require.NoError(t, err)
	_, err = shellexec.Register(w2, nc, &shellexec.Config{
		Policy: shell.Policy{Security: shell.SecurityAllowlist, Ask: shell.AskOnMiss}, Approvers: []string{b.approver}, Logger: quiet,
	})
	require.NoError(t, err)
	require.NoError(t, w2.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		require.NoError(t, w2.Stop(sctx))
	})
}

func (b *bundle) record(t *testing.T, id string) *shellexec.Record {
	t.Helper()
	r, err := shellexec.LoadApproval(testutil.Context(t, 5*time.Second), b.prod, id)
	require.NoError(t, err)
	return r
}

func TestAllowedCommandRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job := b.exec(t, map[string]any{"command": `echo "it's" 'a b' | tr a-z A-Z`, "workdir": b.work})
	ev := b.await(t, job.Session, job.ID, true)
	r := runResult(t, ev)
	require.Equal(t, 0, r.ExitCode)
	require.Equal(t, "IT'S A B\n", r.Stdout)
	require.False(t, r.TimedOut)
	require.Equal(t, []contracts.Status{contracts.StatusCompleted}, statuses(b.events(t, job.Session, job.ID)))
}

func TestDeniedCommand(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cases := []struct {
		name   string
		in     map[string]any
		reason string
	}{
		{"job tightens to deny", map[string]any{"command": "echo hi", "security": "deny"}, "deny"},
		{"PATH override", map[string]any{"command": "echo hi", "env": map[string]string{"PATH": "/tmp"}}, "PATH"},
		{"LD_PRELOAD override", map[string]any{"command": "echo hi", "env": map[string]string{"LD_PRELOAD": "/tmp/x.so"}}, "LD_PRELOAD"},
		{"substitution", map[string]any{"command": "echo $(id)"}, "substitution"},
	}
	for _, tc := range cases {
		job := b.exec(t, tc.in)
		ev := b.await(t, job.Session, job.ID, true)
		require.Equal(t, contracts.StatusDenied, ev.Data.Status, tc.name)
		require.Equal(t, contracts.CodeDenied, ev.Data.Error.Code, tc.name)
		var d shellexec.DeniedResult
		require.NoError(t, json.Unmarshal(ev.Data.Result, &d))
		require.Contains(t, strings.ToLower(d.Reason), strings.ToLower(tc.reason), tc.name)
		require.Equal(t, d.Reason, ev.Data.Error.Message, tc.name)
	}
	// A job cannot loosen ask: "off" on an on-miss worker still asks.
	b.pending(t, map[string]any{"command": "rm -rf /tmp/x", "ask": "off"})
}

func TestApproveRunsTheApprovedPlan(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job, p := b.pending(t, map[string]any{"command": "seq 3", "workdir": b.work, "env": map[string]string{"TZ": "UTC"}, "timeout": 7})
	require.Equal(t, job.ID, p.ApprovalID)
	require.Equal(t, "seq 3", p.Command)
	require.Equal(t, [][]string{{"/usr/bin/seq", "3"}}, p.Argv)
	require.Equal(t, b.work, p.Workdir)
	// The approver sees everything the hash binds that a job chose.
	require.Equal(t, map[string]string{"TZ": "UTC"}, p.Env)
	require.Equal(t, int64(7000), p.TimeoutMs)
	require.Equal(t, shell.HostSandbox, p.Host)
	require.Equal(t, []string{"/usr/bin/seq"}, p.Unlisted)
	require.NotEmpty(t, p.Reason)
	require.NotEmpty(t, p.Hash)
	require.WithinDuration(t, time.Now().Add(shell.DefaultApprovalTTL), p.ExpiresAt, time.Minute)
	rec := b.record(t, p.ApprovalID)
	require.Equal(t, shellexec.StatusPending, rec.Status)
	require.Equal(t, p.Hash, rec.Approval.Hash)

	r := decideResult(t, b.decide(t, p.ApprovalID, shell.Approve, b.seed, nil))
	require.True(t, r.Applied)
	require.Equal(t, shellexec.StatusApproved, r.Status)
	require.Equal(t, job.ID, r.JobID)

	res := runResult(t, b.await(t, job.Session, job.ID, false))
	require.Equal(t, "1\n2\n3\n", res.Stdout)
	evs := b.events(t, job.Session, job.ID)
	require.Equal(t, []contracts.Status{contracts.StatusApprovalPending, contracts.StatusApproved, contracts.StatusCompleted}, statuses(evs))
	var ap shellexec.ApprovedResult
	require.NoError(t, json.Unmarshal(evs[1].Data.Result, &ap))
	require.Equal(t, b.approver, ap.Approver)
	require.Equal(t, shellexec.StatusApproved, b.record(t, p.ApprovalID).Status)

	// A second decision, and a replay of the first, do nothing.
	again := decideResult(t, b.decide(t, p.ApprovalID, shell.Reject, b.seed, nil))
	require.False(t, again.Applied)
	require.Equal(t, shellexec.StatusApproved, again.Status)
	first := b.record(t, p.ApprovalID).Decision
	require.NotNil(t, first)
	replay := decideResult(t, b.submitDecision(t, *first))
	require.False(t, replay.Applied)
	require.Len(t, b.events(t, job.Session, job.ID), 3)
}

func TestDenyByApprover(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job, p := b.pending(t, map[string]any{"command": "seq 3"})
	r := decideResult(t, b.decide(t, p.ApprovalID, shell.Reject, b.seed, &shellexec.DecideOpts{Reason: "not today"}))
	require.True(t, r.Applied)
	require.Equal(t, shellexec.StatusDenied, r.Status)
	ev := b.await(t, job.Session, job.ID, false)
	require.Equal(t, contracts.StatusDenied, ev.Data.Status)
	require.Equal(t, contracts.CodeDenied, ev.Data.Error.Code)
	var d shellexec.DeniedResult
	require.NoError(t, json.Unmarshal(ev.Data.Result, &d))
	require.Equal(t, "denied by approver: not today", d.Reason)
	require.Equal(t, b.approver, d.Approver)
	require.Equal(t, []contracts.Status{contracts.StatusApprovalPending, contracts.StatusDenied}, statuses(b.events(t, job.Session, job.ID)))
	// An approval after the denial does nothing.
	require.False(t, decideResult(t, b.decide(t, p.ApprovalID, shell.Approve, b.seed, nil)).Applied)
	require.Len(t, b.events(t, job.Session, job.ID), 2)
}

func TestApprovalTimesOut(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *shellexec.Config) { c.ApprovalTTL = 3 * time.Second })
	job, p := b.pending(t, map[string]any{"command": "seq 3"})
	ev := b.await(t, job.Session, job.ID, false)
	require.Equal(t, contracts.StatusDenied, ev.Data.Status)
	var d shellexec.DeniedResult
	require.NoError(t, json.Unmarshal(ev.Data.Result, &d))
	require.Equal(t, shellexec.ReasonTimeout, d.Reason)
	require.Equal(t, "seq 3", d.Command)
	require.True(t, strings.HasPrefix(ev.Data.Error.Message, "timeout"))
	// The record is gone: a late decision is refused.
	_, err := b.prod.Approval(testutil.Context(t, 5*time.Second), p.ApprovalID)
	require.ErrorIs(t, err, producer.ErrNoApproval)
	require.Equal(t, contracts.StatusFailed, b.submitDecision(t, shell.ApprovalDecision{ApprovalID: p.ApprovalID}).Data.Status)

	// A decided approval does not expire under its command: this one runs
	// past the approval's TTL.
	job, p = b.pending(t, map[string]any{"command": "sleep 4"})
	require.True(t, decideResult(t, b.decide(t, p.ApprovalID, shell.Approve, b.seed, nil)).Applied)
	runResult(t, b.await(t, job.Session, job.ID, false))
	require.Equal(t, []contracts.Status{contracts.StatusApprovalPending, contracts.StatusApproved, contracts.StatusCompleted},
		statuses(b.events(t, job.Session, job.ID)))
	require.Equal(t, shellexec.StatusApproved, b.record(t, p.ApprovalID).Status)
}

func TestRefusedDecisionsLeaveTheApprovalAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job, p := b.pending(t, map[string]any{"command": "seq 3"})
	_, other := b.pending(t, map[string]any{"command": "seq 4"})
	rec := b.record(t, p.ApprovalID)
	otherRec := b.record(t, other.ApprovalID)
	strangerSeed, _ := newApprover(t)

	signed := func(d shell.ApprovalDecision, seed []byte) shell.ApprovalDecision {
		s, err := shell.SignDecision(d, seed)
		require.NoError(t, err)
		return s
	}
	good := signed(shell.NewDecision(&rec.Approval, shell.Approve, false, "", time.Now()), b.seed)
	unsigned := good
	unsigned.Signature = ""
	tampered := good
	tampered.Always = true // covered by the signature
	// A decision for a different argv: signed for seq 4, sent for seq 3.
	wrongArgv := shell.NewDecision(&otherRec.Approval, shell.Approve, false, "", time.Now())
	wrongArgv.ApprovalID = rec.Approval.ID
	wrongArgv = signed(wrongArgv, b.seed)
	old := shell.NewDecision(&rec.Approval, shell.Approve, false, "", time.Now().Add(-time.Hour))

	for name, d := range map[string]shell.ApprovalDecision{
		"unsigned":         unsigned,
		"unknown approver": signed(shell.NewDecision(&rec.Approval, shell.Approve, false, "", time.Now()), strangerSeed),
		"tampered":         tampered,
		"different argv":   wrongArgv,
		"issued too early": signed(old, b.seed),
	} {
		ev := b.submitDecision(t, d)
		require.Equal(t, contracts.StatusFailed, ev.Data.Status, name)
		require.Equal(t, contracts.CodeDenied, ev.Data.Error.Code, name)
		require.Equal(t, shellexec.StatusPending, b.record(t, p.ApprovalID).Status, name)
	}
	// An approval of another id entirely is unknown.
	unknown := good
	unknown.ApprovalID = "no-such-approval"
	ev := b.submitDecision(t, unknown)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeInvalidInput, ev.Data.Error.Code)

	require.Equal(t, []contracts.Status{contracts.StatusApprovalPending}, statuses(b.events(t, job.Session, job.ID)))
	// The valid one still decides it.
	require.True(t, decideResult(t, b.submitDecision(t, good)).Applied)
	require.Equal(t, "1\n2\n3\n", runResult(t, b.await(t, job.Session, job.ID, false)).Stdout)
}

func TestApproveAlwaysAllowlists(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job, p := b.pending(t, map[string]any{"command": "seq 2"})
	require.True(t, decideResult(t, b.decide(t, p.ApprovalID, shell.Approve, b.seed, &shellexec.DecideOpts{Always: true})).Applied)
	require.Equal(t, "1\n2\n", runResult(t, b.await(t, job.Session, job.ID, false)).Stdout)

	kv, err := b.js.KeyValue(testutil.Context(t, 5*time.Second), "toolq_exec_policy")
	require.NoError(t, err)
	e, err := kv.Get(testutil.Context(t, 5*time.Second), shellexec.DefaultPolicyKey)
	require.NoError(t, err)
	pol, err := shellexec.DecodePolicy(e.Value())
	require.NoError(t, err)
	require.Equal(t, []string{"'/usr/bin/seq' 2"}, pol.Allowlist, "the exact argv, not the whole binary")

	// The same command now runs without a person; seq with other arguments
	// still asks.
	next := b.exec(t, map[string]any{"command": "seq 2"})
	require.Equal(t, "1\n2\n", runResult(t, b.await(t, next.Session, next.ID, true)).Stdout)
	require.Len(t, b.events(t, next.Session, next.ID), 1)
	b.pending(t, map[string]any{"command": "seq 3"})
}

func TestSharedPolicyOnlyTightens(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testutil.Context(t, 10*time.Second)
	kv, err := b.js.KeyValue(ctx, "toolq_exec_policy")
	require.NoError(t, err)

	// Looser modes in the shared policy do not loosen the worker's.
	_, err = kv.Put(ctx, shellexec.DefaultPolicyKey, []byte(`{"security":"full","ask":"off"}`))
	require.NoError(t, err)
	b.pending(t, map[string]any{"command": "seq 3"})

	// A stricter one tightens every worker at once.
	_, err = kv.Put(ctx, shellexec.DefaultPolicyKey, []byte(`{"security":"deny"}`))
	require.NoError(t, err)
	job := b.exec(t, map[string]any{"command": "echo hi"})
	require.Equal(t, contracts.StatusDenied, b.await(t, job.Session, job.ID, true).Data.Status)

	// A broken shared policy fails closed.
	_, err = kv.Put(ctx, shellexec.DefaultPolicyKey, []byte(`{"security":"deny","bogus":1}`))
	require.NoError(t, err)
	job = b.exec(t, map[string]any{"command": "echo hi"})
	ev := b.await(t, job.Session, job.ID, true)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
}

func TestRunningNoticeForSlowApprovedCommand(t *testing.T) {
	t.Parallel()
	ms := 100
	b := setup(t, func(c *shellexec.Config) { c.ApprovalRunningNoticeMs = &ms })
	job, p := b.pending(t, map[string]any{"command": "sleep 1"})
	require.True(t, decideResult(t, b.decide(t, p.ApprovalID, shell.Approve, b.seed, nil)).Applied)
	runResult(t, b.await(t, job.Session, job.ID, false))
	evs := b.events(t, job.Session, job.ID)
	require.Equal(t, []contracts.Status{
		contracts.StatusApprovalPending, contracts.StatusApproved, contracts.StatusRunningNotice, contracts.StatusCompleted,
	}, statuses(evs))
	var n shellexec.NoticeResult
	require.NoError(t, json.Unmarshal(evs[2].Data.Result, &n))
	require.Equal(t, "sleep 1", n.Command)
	require.GreaterOrEqual(t, n.ElapsedMs, int64(ms))

	// 0 disables the notice.
	off := 0
	b = setup(t, func(c *shellexec.Config) { c.ApprovalRunningNoticeMs = &off })
	job, p = b.pending(t, map[string]any{"command": "sleep 1"})
	require.True(t, decideResult(t, b.decide(t, p.ApprovalID, shell.Approve, b.seed, nil)).Applied)
	runResult(t, b.await(t, job.Session, job.ID, false))
	require.NotContains(t, statuses(b.events(t, job.Session, job.ID)), contracts.StatusRunningNotice)
}

func TestCancelPendingApproval(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job, p := b.pending(t, map[string]any{"command": "seq 3"})
	require.NoError(t, b.prod.Cancel(testutil.Context(t, 5*time.Second), job.Session, job.ID))
	require.Equal(t, contracts.StatusCancelled, b.await(t, job.Session, job.ID, false).Data.Status)
	require.Eventually(t, func() bool {
		r, err := shellexec.LoadApproval(testutil.Context(t, 5*time.Second), b.prod, p.ApprovalID)
		return err == nil && r.Status == shellexec.StatusCancelled
	}, 10*time.Second, 20*time.Millisecond)
	r := decideResult(t, b.decide(t, p.ApprovalID, shell.Approve, b.seed, nil))
	require.False(t, r.Applied)
	require.Equal(t, shellexec.StatusCancelled, r.Status)
	require.Equal(t, []contracts.Status{contracts.StatusApprovalPending, contracts.StatusCancelled}, statuses(b.events(t, job.Session, job.ID)))
}

// TestCancelMarkedWhileNoWorkerRan: a cancel mark written while no exec
// worker ran (as a tenant writes one: a mark and no event) reaches no
// cancel hook, since a worker that starts takes the marks already there as
// known, not as news. An approval that comes after it finds the mark when it
// is decided: the job ends cancelled and the command never runs.
func TestCancelMarkedWhileNoWorkerRan(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job, p := b.pending(t, map[string]any{"command": "seq 3"})
	ctx := testutil.Context(t, 20*time.Second)
	require.NoError(t, b.w.Stop(ctx))
	kv, err := b.js.KeyValue(ctx, contracts.Subjects{}.CancelsBucket())
	require.NoError(t, err)
	_, err = kv.Put(ctx, contracts.CancelKey("", job.Session, job.ID), []byte(job.Session))
	require.NoError(t, err)

	b.startSecondWorker(ctx, t)

	b.decide(t, p.ApprovalID, shell.Approve, b.seed, nil)
	ev := b.await(t, job.Session, job.ID, false)
	require.Equal(t, contracts.StatusCancelled, ev.Data.Status, "%s %v", ev.Data.Result, ev.Data.Error)
	require.Equal(t, []contracts.Status{contracts.StatusApprovalPending, contracts.StatusCancelled}, statuses(b.events(t, job.Session, job.ID)))
}

func TestCancelKillsApprovedCommand(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job, p := b.pending(t, map[string]any{"command": "sleep 60"})
	dj, _, err := shellexec.Decide(testutil.Context(t, 5*time.Second), b.prod, p.ApprovalID, shell.Approve, b.seed, nil)
	require.NoError(t, err)
	// Wait until it runs (the approved event), then cancel.
	require.Eventually(t, func() bool {
		evs := b.events(t, job.Session, job.ID)
		return len(evs) == 2 && evs[1].Data.Status == contracts.StatusApproved
	}, 10*time.Second, 20*time.Millisecond)
	start := time.Now()
	require.NoError(t, b.prod.Cancel(testutil.Context(t, 5*time.Second), job.Session, job.ID))
	require.True(t, decideResult(t, b.await(t, dj.Session, dj.ID, false)).Applied)
	require.Less(t, time.Since(start), 30*time.Second)
	require.Equal(t, []contracts.Status{contracts.StatusApprovalPending, contracts.StatusApproved, contracts.StatusCancelled},
		statuses(b.events(t, job.Session, job.ID)))
}

func TestTimeoutKillsChildrenEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *shellexec.Config) {
		c.Policy.Security, c.Policy.Ask, c.Policy.AllowWorkerHost = shell.SecurityFull, shell.AskOff, true
	})
	job := b.exec(t, map[string]any{
		"command": `sleep 60 & echo $! > child.pid; wait`, "workdir": b.work, "host": "worker", "timeout": 1,
	})
	r := runResult(t, b.await(t, job.Session, job.ID, true))
	require.True(t, r.TimedOut)
	require.Equal(t, -1, r.ExitCode)
	data, err := os.ReadFile(filepath.Join(b.work, "child.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !alive(pid) }, 5*time.Second, 20*time.Millisecond,
		"the command's child must be killed")
}

// alive reads the process table (an external system): a zombie waiting for
// its reaper counts as dead.
func alive(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	st := string(b)
	i := strings.LastIndexByte(st, ')')
	return i < 0 || i+2 >= len(st) || st[i+2] != 'Z' && st[i+2] != 'X'
}

func TestSandboxFailsClosedWithoutBwrap(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *shellexec.Config) { c.Runner.Bwrap = "/nonexistent/bwrap" })
	job := b.exec(t, map[string]any{"command": "echo hi"})
	ev := b.await(t, job.Session, job.ID, true)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeRuntimeUnavailable, ev.Data.Error.Code)
}

func TestBackgroundSession(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *shellexec.Config) { c.FlushInterval = 20 * time.Millisecond })
	job := b.exec(t, map[string]any{"command": "echo hello", "background": true})
	ev := b.await(t, job.Session, job.ID, true)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%s %v", ev.Data.Result, ev.Data.Error)
	var bg shellexec.BackgroundResult
	require.NoError(t, json.Unmarshal(ev.Data.Result, &bg))
	require.Equal(t, shellexec.SessionID(job.ID), bg.SessionID)
	require.Equal(t, "running", bg.Status)

	res := runResult(t, b.await(t, job.Session, bg.SessionID, false))
	require.Equal(t, "hello\n", res.Stdout)
	evs := b.events(t, job.Session, bg.SessionID)
	st := statuses(evs)
	require.Equal(t, contracts.StatusRunning, st[0])
	require.Equal(t, contracts.StatusCompleted, st[len(st)-1])
	var streamed strings.Builder
	for _, e := range evs[1 : len(evs)-1] {
		require.Equal(t, contracts.StatusProgress, e.Data.Status)
		var c shellexec.OutputChunk
		require.NoError(t, json.Unmarshal(e.Data.Result, &c))
		streamed.WriteString(c.Stdout)
	}
	require.Equal(t, "hello\n", streamed.String())
}

func TestApprovedBackgroundSessionCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job, p := b.pending(t, map[string]any{"command": "sleep 60", "background": true})
	require.True(t, p.Background)
	require.True(t, decideResult(t, b.decide(t, p.ApprovalID, shell.Approve, b.seed, nil)).Applied)
	ev := b.await(t, job.Session, job.ID, false)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	var bg shellexec.BackgroundResult
	require.NoError(t, json.Unmarshal(ev.Data.Result, &bg))
	require.Eventually(t, func() bool {
		evs := b.events(t, job.Session, bg.SessionID)
		return len(evs) > 0 && evs[0].Data.Status == contracts.StatusRunning
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, b.prod.Cancel(testutil.Context(t, 5*time.Second), job.Session, bg.SessionID))
	require.Equal(t, contracts.StatusCancelled, b.await(t, job.Session, bg.SessionID, false).Data.Status)
	// The killed session writes nothing after its end.
	require.Equal(t, []contracts.Status{contracts.StatusRunning, contracts.StatusCancelled}, statuses(b.events(t, job.Session, bg.SessionID)))
}

// decidedByDJ1 leaves what a worker leaves behind when it dies while the
// approved command runs: the record decided by decide job dj-1 and the exec
// job approved. It returns the exec job and the recorded decision.
func (b *bundle) decidedByDJ1(t *testing.T) (*contracts.Job, shell.ApprovalDecision) {
	t.Helper()
	job, p := b.pending(t, map[string]any{"command": "seq 3"})
	ctx := testutil.Context(t, 10*time.Second)
	rec := b.record(t, p.ApprovalID)
	d, err := shell.SignDecision(shell.NewDecision(&rec.Approval, shell.Approve, false, "", time.Now()), b.seed)
	require.NoError(t, err)
	rec.Status, rec.Decision, rec.DecideJob, rec.DecidedAt = shellexec.StatusApproved, &d, "dj-1", time.Now()
	data, err := json.Marshal(rec)
	require.NoError(t, err)
	kv, err := b.js.KeyValue(ctx, "toolq_approvals")
	require.NoError(t, err)
	_, err = kv.Put(ctx, p.ApprovalID, data)
	require.NoError(t, err)
	require.NoError(t, b.w.Emit(ctx, &contracts.Job{ID: job.ID, Session: job.Session, Tool: job.Tool}, contracts.StatusApproved, 1, nil, nil))
	return job, d
}

// TestRedeliveredDecisionDoesNotRunTwice: a decide job redelivered after its
// worker died while the approved command ran fails the exec job instead of
// running the command again.
func TestRedeliveredDecisionDoesNotRunTwice(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job, d := b.decidedByDJ1(t)
	ctx := testutil.Context(t, 20*time.Second)

	// The first delivery of dj-1 goes to a worker that never answers: the
	// worker is stopped and the test takes the message and hands it back.
	require.NoError(t, b.w.Stop(ctx))
	dj, err := b.prod.Decide(ctx, &d, &producer.SubmitOpts{ID: "dj-1"})
	require.NoError(t, err)
	var subj contracts.Subjects
	cons, err := b.js.Consumer(ctx, subj.JobsStream(), subj.ConsumerName(shellexec.ToolDecide))
	require.NoError(t, err)
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	n := 0
	for m := range batch.Messages() {
		require.NoError(t, m.Nak())
		n++
	}
	require.Equal(t, 1, n)

	b.startSecondWorker(ctx, t)

	require.True(t, decideResult(t, b.await(t, dj.Session, dj.ID, false)).Applied)
	ev := b.await(t, job.Session, job.ID, false)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Contains(t, ev.Data.Error.Message, "not run again")

	// Any other decide job with the same decision does nothing.
	dj2, err := b.prod.Decide(ctx, &d, nil)
	require.NoError(t, err)
	require.False(t, decideResult(t, b.await(t, dj2.Session, dj2.ID, false)).Applied)
}

// TestReplayedDecisionChangesNothing: the deciding job republished after
// the duplicate window (a new message, first delivery, same job id) is
// answered with the recorded outcome and leaves the running job alone.
func TestReplayedDecisionChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job, d := b.decidedByDJ1(t)
	ctx := testutil.Context(t, 10*time.Second)
	dj, err := b.prod.Decide(ctx, &d, &producer.SubmitOpts{ID: "dj-1"})
	require.NoError(t, err)
	r := decideResult(t, b.await(t, dj.Session, dj.ID, false))
	require.False(t, r.Applied)
	require.Equal(t, shellexec.StatusApproved, r.Status)
	require.Equal(t, []contracts.Status{contracts.StatusApprovalPending, contracts.StatusApproved},
		statuses(b.events(t, job.Session, job.ID)), "a replay must not end a running approved job")
}

// TestRepeatedDecisionIsVerified: a decision that carries the recorded
// signature is still verified; changing any signed field is refused.
func TestRepeatedDecisionIsVerified(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job, d := b.decidedByDJ1(t)
	ctx := testutil.Context(t, 10*time.Second)
	forged := d
	forged.Always = true
	raw, err := json.Marshal(shellexec.DecideInput{Decision: forged})
	require.NoError(t, err)
	dj, err := b.prod.Submit(ctx, shellexec.ToolDecide, raw, &producer.SubmitOpts{ID: "dj-1"})
	require.NoError(t, err)
	ev := b.await(t, dj.Session, dj.ID, false)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeDenied, ev.Data.Error.Code)
	require.Contains(t, ev.Data.Error.Message, "signature")
	require.Equal(t, []contracts.Status{contracts.StatusApprovalPending, contracts.StatusApproved},
		statuses(b.events(t, job.Session, job.ID)))
}

func TestBackgroundStreamIsCapped(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *shellexec.Config) {
		c.MaxStreamBytes, c.FlushInterval = 10, 10*time.Millisecond
		c.Policy.Allowlist = append(c.Policy.Allowlist, "/usr/bin/seq")
	})
	job := b.exec(t, map[string]any{"command": "seq 1000", "background": true})
	require.Equal(t, contracts.StatusCompleted, b.await(t, job.Session, job.ID, true).Data.Status)
	sid := shellexec.SessionID(job.ID)
	res := runResult(t, b.await(t, job.Session, sid, false))
	require.True(t, strings.HasPrefix(res.Stdout, "1\n2\n3\n"))
	require.True(t, strings.HasSuffix(res.Stdout, "999\n1000\n"))
	var streamed strings.Builder
	truncated := false
	for _, e := range b.events(t, job.Session, sid) {
		if e.Data.Status != contracts.StatusProgress {
			continue
		}
		var c shellexec.OutputChunk
		require.NoError(t, json.Unmarshal(e.Data.Result, &c))
		streamed.WriteString(c.Stdout)
		truncated = truncated || c.Truncated
	}
	require.Equal(t, "1\n2\n3\n4\n5\n", streamed.String())
	require.True(t, truncated)
}

func TestSessionIDFitsAnyJobID(t *testing.T) {
	t.Parallel()
	require.Equal(t, "j1-bg", shellexec.SessionID("j1"))
	long := strings.Repeat("a", contracts.MaxIDLength)
	sid := shellexec.SessionID(long)
	require.True(t, contracts.ValidID(sid), sid)
	require.NotEqual(t, sid, shellexec.SessionID(strings.Repeat("b", contracts.MaxIDLength)))
}

func TestStopKillsBackgroundSessions(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	job, p := b.pending(t, map[string]any{"command": "sleep 60", "background": true})
	require.True(t, decideResult(t, b.decide(t, p.ApprovalID, shell.Approve, b.seed, nil)).Applied)
	require.Equal(t, contracts.StatusCompleted, b.await(t, job.Session, job.ID, false).Data.Status)
	sid := shellexec.SessionID(job.ID)
	require.Eventually(t, func() bool { return len(b.events(t, job.Session, sid)) > 0 }, 10*time.Second, 20*time.Millisecond)

	ctx := testutil.Context(t, 20*time.Second)
	require.NoError(t, b.w.Stop(ctx))
	require.NoError(t, b.se.Stop(ctx))
	ev := b.await(t, job.Session, sid, false)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeCancelled, ev.Data.Error.Code)
	require.NoError(t, b.se.Stop(ctx), "a second Stop is harmless")
}

func TestForegroundCommandYieldsToTheBackground(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *shellexec.Config) {
		c.FlushInterval = 20 * time.Millisecond
		c.Policy.Allowlist = append(c.Policy.Allowlist, "/usr/bin/sleep")
	})
	job := b.exec(t, map[string]any{"command": "echo start; sleep 1; echo end", "yieldMs": 200})
	ev := b.await(t, job.Session, job.ID, true)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	var bg shellexec.BackgroundResult
	require.NoError(t, json.Unmarshal(ev.Data.Result, &bg))
	require.True(t, bg.Yielded)
	require.Equal(t, shellexec.SessionID(job.ID), bg.SessionID)

	res := runResult(t, b.await(t, job.Session, bg.SessionID, false))
	require.Equal(t, "start\nend\n", res.Stdout)
	var streamed strings.Builder
	for _, e := range b.events(t, job.Session, bg.SessionID) {
		if e.Data.Status == contracts.StatusProgress {
			var c shellexec.OutputChunk
			require.NoError(t, json.Unmarshal(e.Data.Result, &c))
			streamed.WriteString(c.Stdout)
		}
	}
	require.Equal(t, "start\nend\n", streamed.String(), "output from before the yield is streamed too")

	// yieldMs 0 never yields: the job waits for the command.
	job = b.exec(t, map[string]any{"command": "echo a; sleep 1", "yieldMs": 0})
	r := runResult(t, b.await(t, job.Session, job.ID, true))
	require.Equal(t, "a\n", r.Stdout)
	require.GreaterOrEqual(t, r.DurationMs, int64(1000))
}

func TestCancelBeforeYieldKillsTheCommand(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *shellexec.Config) { c.Policy.Allowlist = append(c.Policy.Allowlist, "/usr/bin/sleep") })
	data, err := json.Marshal(map[string]any{"command": "sleep 60", "yieldMs": 60000})
	require.NoError(t, err)
	ctx := testutil.Context(t, 30*time.Second)
	job, err := b.prod.Submit(ctx, shellexec.ToolExec, data, &producer.SubmitOpts{Progress: true})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(b.events(t, job.Session, job.ID)) > 0 }, 10*time.Second, 20*time.Millisecond)
	start := time.Now()
	require.NoError(t, b.prod.Cancel(ctx, job.Session, job.ID))
	require.Equal(t, contracts.StatusCancelled, b.await(t, job.Session, job.ID, false).Data.Status)
	// The worker's exec tool stops promptly: nothing is left running.
	require.NoError(t, b.w.Stop(ctx))
	require.NoError(t, b.se.Stop(ctx))
	require.Less(t, time.Since(start), 20*time.Second)
	require.Empty(t, b.events(t, job.Session, shellexec.SessionID(job.ID)))
}

func TestBackgroundSessionsAreCapped(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *shellexec.Config) {
		c.MaxSessions = 1
		c.Policy.Allowlist = append(c.Policy.Allowlist, "/usr/bin/sleep")
	})
	first := b.exec(t, map[string]any{"command": "sleep 60", "background": true})
	require.Equal(t, contracts.StatusCompleted, b.await(t, first.Session, first.ID, true).Data.Status)

	second := b.exec(t, map[string]any{"command": "sleep 60", "background": true})
	ev := b.await(t, second.Session, second.ID, true)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeRuntimeUnavailable, ev.Data.Error.Code)

	// At the cap a long foreground command does not yield: it finishes.
	job := b.exec(t, map[string]any{"command": "echo a; sleep 1", "yieldMs": 100})
	require.Equal(t, "a\n", runResult(t, b.await(t, job.Session, job.ID, true)).Stdout)

	// Ending the session frees its slot.
	ctx := testutil.Context(t, 10*time.Second)
	sid := shellexec.SessionID(first.ID)
	require.NoError(t, b.prod.Cancel(ctx, first.Session, sid))
	require.Equal(t, contracts.StatusCancelled, b.await(t, first.Session, sid, false).Data.Status)
	require.Eventually(t, func() bool {
		j := b.exec(t, map[string]any{"command": "echo again", "background": true})
		return b.await(t, j.Session, j.ID, true).Data.Status == contracts.StatusCompleted
	}, 10*time.Second, 50*time.Millisecond)
}

// A Stop whose context ends first returns early, but the stop goes on: a
// second Stop waits for it, so by then the killed background session has
// written its end and nothing of the tool runs any more.
func TestSecondStopWaitsForTheFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *shellexec.Config) { c.Policy.Allowlist = append(c.Policy.Allowlist, "/usr/bin/sleep") })
	job := b.exec(t, map[string]any{"command": "sleep 60", "background": true})
	require.Equal(t, contracts.StatusCompleted, b.await(t, job.Session, job.ID, true).Data.Status)
	sid := shellexec.SessionID(job.ID)
	require.Eventually(t, func() bool { return len(b.events(t, job.Session, sid)) > 0 }, 10*time.Second, 20*time.Millisecond)

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	_ = b.se.Stop(ended) // returns when its context ends; the stop goes on
	require.NoError(t, b.se.Stop(testutil.Context(t, 20*time.Second)))
	select {
	case <-b.se.Stopped():
	default:
		t.Fatal("Stopped is not closed after Stop returned")
	}
	evs := b.events(t, job.Session, sid)
	last := evs[len(evs)-1]
	require.Equal(t, contracts.StatusFailed, last.Data.Status, "the session's end is written before Stop returns")
	require.Equal(t, contracts.CodeCancelled, last.Data.Error.Code)
}

// TestSandboxLimitsStopCommands: a fork bomb, a memory bomb, a huge file
// and a nested user namespace each fail their job with code denied and a
// reason naming the limit, and the worker runs the next job as usual.
func TestSandboxLimitsStopCommands(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *shellexec.Config) {
		c.Policy.Security, c.Policy.Ask = shell.SecurityFull, shell.AskOff
		c.Runner.Limits = shell.Limits{Processes: 32, MemoryBytes: 64 << 20, FileBytes: 1 << 20, TmpBytes: 1 << 20}
	})
	cases := []struct{ name, command, reason string }{
		{"fork bomb", `b(){ b | b & }; b; sleep 20`, "process limit of 32 reached"},
		{"memory bomb", `tail /dev/zero`, "memory limit of 67108864 bytes reached"},
		{"huge file", `head -c 10000000 /dev/zero > big`, "file size limit of 1048576 bytes exceeded"},
		{"nested user namespace", `unshare -U -r id -u`, "forbidden system call"},
	}
	for _, tc := range cases {
		job := b.exec(t, map[string]any{"command": tc.command, "workdir": b.work, "timeout": 30})
		ev := b.await(t, job.Session, job.ID, false)
		require.Equal(t, contracts.StatusFailed, ev.Data.Status, "%s: %s", tc.name, ev.Data.Result)
		require.Equal(t, contracts.CodeDenied, ev.Data.Error.Code, tc.name)
		require.Contains(t, ev.Data.Error.Message, tc.reason, tc.name)

		next := b.exec(t, map[string]any{"command": "echo next"})
		require.Equal(t, "next\n", runResult(t, b.await(t, next.Session, next.ID, false)).Stdout, "after the %s", tc.name)
	}
}

// A worker that trusts no approver takes no decisions: a decision waits for
// a worker that can accept it instead of being refused as "from an unknown
// approver" by whichever worker pulled it first.
func TestWorkerWithoutApproversTakesNoDecisions(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	nc := srv.Connect(t)
	w, err := worker.New(nc, &worker.Config{Name: "no-approvers", Logger: quiet})
	require.NoError(t, err)
	_, err = shellexec.Register(w, nc, &shellexec.Config{
		Policy: shell.Policy{Security: shell.SecurityAllowlist, Ask: shell.AskOnMiss}, Logger: quiet,
	})
	require.NoError(t, err)
	require.Contains(t, w.Tools(), shellexec.ToolExec)
	require.NotContains(t, w.Tools(), shellexec.ToolDecide)

	w2, err := worker.New(nc, &worker.Config{Name: "approvers", Logger: quiet})
	require.NoError(t, err)
	_, err = shellexec.Register(w2, nc, &shellexec.Config{
		Policy:    shell.Policy{Security: shell.SecurityAllowlist, Ask: shell.AskOnMiss},
		Approvers: []string{approverKey(t)}, Logger: quiet,
	})
	require.NoError(t, err)
	require.Contains(t, w2.Tools(), shellexec.ToolDecide)
}

func approverKey(t *testing.T) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	return pub
}
