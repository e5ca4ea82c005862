package shellexec_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/tools/shellexec"
	"github.com/toolq/toolq/worker"
)

// tenantBundle is a worker serving the default tenant and two registered
// tenants, each with an approver of its own.
type tenantBundle struct {
	nc                         *nats.Conn
	js                         jetstream.JetStream
	events                     jetstream.Stream
	approvals                  jetstream.KeyValue
	work                       string
	defSeed, acmeSeed, gxSeed  []byte
	defKey, acmeKey, globexKey string
}

func setupTenants(t *testing.T, mutate func(c *shellexec.Config)) *tenantBundle {
	t.Helper()
	srv := testutil.StartJetStream(t)
	b := &tenantBundle{}
	b.defSeed, b.defKey = newApprover(t)
	b.acmeSeed, b.acmeKey = newApprover(t)
	b.gxSeed, b.globexKey = newApprover(t)
	b.work = filepath.Join(t.TempDir(), "work")
	require.NoError(t, os.Mkdir(b.work, 0o750))
	b.nc = srv.Connect(t)
	b.js = testutil.JetStream(t, b.nc)
	ctx := testutil.Context(t, 20*time.Second)
	for name, key := range map[string]string{"ACME": b.acmeKey, "GLOBEX": b.globexKey} {
		require.NoError(t, bus.AddTenant(ctx, b.js, bus.Config{}, contracts.TenantRecord{Name: name, Approvers: []string{key}}))
	}
	cfg := shellexec.Config{
		Policy: shell.Policy{
			Security: shell.SecurityAllowlist, Ask: shell.AskOnMiss,
			Allowlist: []string{"/usr/bin/echo"}, WorkdirRoots: []string{filepath.Dir(b.work)},
		},
		Runner:    shell.RunnerConfig{ScratchDir: t.TempDir()},
		Approvers: []string{b.defKey}, Tenants: true,
		Logger: quiet,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	w, err := worker.New(b.nc, &worker.Config{Name: "w1", Tenants: true, Logger: quiet, StopTimeout: 5 * time.Second})
	require.NoError(t, err)
	_, err = shellexec.Register(w, b.nc, &cfg)
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx := testutil.Context(t, 15*time.Second)
		require.NoError(t, w.Stop(sctx))
	})
	s := contracts.Subjects{}
	b.events, err = b.js.Stream(ctx, s.EventsStream())
	require.NoError(t, err)
	b.approvals, err = b.js.KeyValue(ctx, s.ApprovalsBucket())
	require.NoError(t, err)
	return b
}

// submit publishes a job of tool on tenant's subject, as the tenant's
// import would deliver it, and returns a subscription to the job's events
// made before the job was sent.
func (b *tenantBundle) submit(t *testing.T, tenant, tool, id string, input any) *nats.Subscription {
	t.Helper()
	s := contracts.Subjects{}
	sub, err := b.nc.SubscribeSync(s.TenantEvent(tenant, "s1", id))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	raw, err := json.Marshal(input)
	require.NoError(t, err)
	data, err := json.Marshal(&contracts.Job{ID: id, Tool: tool, Session: "s1", Input: raw, CreatedAt: time.Now().UTC()})
	require.NoError(t, err)
	_, err = b.js.Publish(testutil.Context(t, 5*time.Second), s.TenantJob(tenant, tool), data, jetstream.WithMsgID(id))
	require.NoError(t, err)
	return sub
}

// next returns the next event on sub whose status is one of want, failing
// on any terminal event that is not.
func next(t *testing.T, sub *nats.Subscription, want ...contracts.Status) *contracts.Event {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		require.NoError(t, err, "no %v event on %s", want, sub.Subject)
		ev, err := contracts.DecodeEvent(m.Data)
		require.NoError(t, err)
		for _, w := range want {
			if ev.Data.Status == w {
				return ev
			}
		}
		require.False(t, ev.Data.Status.Terminal(), "%s ended %s (%s %v), want %v", sub.Subject, ev.Data.Status, ev.Data.Result, ev.Data.Error, want)
	}
}

// last is the last event of tenant's job id.
func (b *tenantBundle) last(t *testing.T, tenant, id string) *contracts.Event {
	t.Helper()
	m, err := b.events.GetLastMsgForSubject(testutil.Context(t, 5*time.Second), contracts.Subjects{}.TenantEvent(tenant, "s1", id))
	require.NoError(t, err)
	ev, err := contracts.DecodeEvent(m.Data)
	require.NoError(t, err)
	return ev
}

// decision signs verdict on the approval of a pending event with seed.
func decision(t *testing.T, p *shellexec.PendingResult, v shell.Verdict, seed []byte) shell.ApprovalDecision {
	t.Helper()
	a := &shell.Approval{ID: p.ApprovalID, Tenant: p.Tenant, Hash: p.Hash}
	d, err := shell.SignDecision(shell.NewDecision(a, v, false, "", time.Now()), seed)
	require.NoError(t, err)
	return d
}

// decide sends d as an exec.decide job on tenant's subject and returns the
// decide job's end.
func (b *tenantBundle) decide(t *testing.T, tenant, id string, d shell.ApprovalDecision) *contracts.Event {
	t.Helper()
	sub := b.submit(t, tenant, shellexec.ToolDecide, id, shellexec.DecideInput{Decision: d})
	return next(t, sub, contracts.StatusCompleted, contracts.StatusFailed)
}

func pendingOf(t *testing.T, ev *contracts.Event) *shellexec.PendingResult {
	t.Helper()
	require.Equal(t, contracts.StatusApprovalPending, ev.Data.Status)
	var p shellexec.PendingResult
	require.NoError(t, json.Unmarshal(ev.Data.Result, &p))
	return &p
}

func refusedDecision(t *testing.T, ev *contracts.Event, what string) {
	t.Helper()
	require.Equal(t, contracts.StatusFailed, ev.Data.Status, what)
	require.Equal(t, contracts.CodeDenied, ev.Data.Error.Code, "%s: %v", what, ev.Data.Error)
}

// TestTenantExecApproval: three tenants park the same command under the
// same approval id. Only a decision signed by the tenant's own approver and
// sent on the tenant's own subject runs the tenant's command; the default
// tenant's approver, another tenant's approver, and a decision moved to
// another tenant's subject leave every approval pending.
func TestTenantExecApproval(t *testing.T) {
	t.Parallel()
	b := setupTenants(t, nil)
	const id = "same-id"
	in := map[string]any{"command": "seq 2", "workdir": b.work, "env": map[string]string{"TZ": "UTC"}}
	pend := map[string]*shellexec.PendingResult{}
	subs := map[string]*nats.Subscription{}
	for _, tenant := range []string{"", "ACME", "GLOBEX"} {
		subs[tenant] = b.submit(t, tenant, shellexec.ToolExec, id, in)
		pend[tenant] = pendingOf(t, next(t, subs[tenant], contracts.StatusApprovalPending))
	}
	acme := pend["ACME"]
	require.Equal(t, "ACME", acme.Tenant)
	require.Empty(t, pend[""].Tenant)
	require.Equal(t, pend[""].Hash, acme.Hash, "the same plan in every tenant")
	// The event carries the whole plan: its hash can be checked from it.
	plan := acme.Plan()
	require.Equal(t, acme.Hash, plan.Hash())
	require.Equal(t, map[string]string{"TZ": "UTC"}, acme.Env)
	// One record per tenant, under the tenant's key.
	ctx := testutil.Context(t, 10*time.Second)
	for key, tenant := range map[string]string{id: "", "ACME." + id: "ACME", "GLOBEX." + id: "GLOBEX"} {
		e, err := b.approvals.Get(ctx, key)
		require.NoError(t, err, key)
		var rec shellexec.Record
		require.NoError(t, json.Unmarshal(e.Value(), &rec))
		require.Equal(t, tenant, rec.Approval.Tenant, key)
	}

	// The default tenant's approver, and GLOBEX's, cannot decide ACME's.
	refusedDecision(t, b.decide(t, "ACME", "d1", decision(t, acme, shell.Approve, b.defSeed)), "default approver")
	refusedDecision(t, b.decide(t, "ACME", "d2", decision(t, acme, shell.Approve, b.gxSeed)), "another tenant's approver")
	// ACME's approver's decision sent on GLOBEX's subject (GLOBEX has an
	// approval of the same id and plan), or on the default subject.
	good := decision(t, acme, shell.Approve, b.acmeSeed)
	refusedDecision(t, b.decide(t, "GLOBEX", "d3", good), "ACME's decision on GLOBEX's subject")
	refusedDecision(t, b.decide(t, "", "d4", good), "ACME's decision on the default subject")
	// Re-labelled for GLOBEX, the signature no longer holds.
	moved := good
	moved.Tenant = "GLOBEX"
	refusedDecision(t, b.decide(t, "GLOBEX", "d5", moved), "ACME's signature re-labelled for GLOBEX")
	// Without the tenant it is a v1 payload, signed by nobody.
	bare := good
	bare.Tenant = ""
	refusedDecision(t, b.decide(t, "", "d6", bare), "ACME's signature without its tenant")
	// A tenant's decision cannot add to the fleet's allowlist.
	always := shell.NewDecision(&shell.Approval{ID: id, Tenant: "ACME", Hash: acme.Hash}, shell.Approve, true, "", time.Now())
	always, err := shell.SignDecision(always, b.acmeSeed)
	require.NoError(t, err)
	refusedDecision(t, b.decide(t, "ACME", "d7", always), "always from a tenant")
	for tenant := range pend {
		require.Equal(t, contracts.StatusApprovalPending, b.last(t, tenant, id).Data.Status, "tenant %q", tenant)
	}

	// ACME's approver on ACME's subject: ACME's command runs, alone.
	ev := b.decide(t, "ACME", "d8", good)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	var r shellexec.DecideResult
	require.NoError(t, json.Unmarshal(ev.Data.Result, &r))
	require.True(t, r.Applied)
	require.Equal(t, shellexec.StatusApproved, r.Status)
	approved := next(t, subs["ACME"], contracts.StatusApproved)
	var ap shellexec.ApprovedResult
	require.NoError(t, json.Unmarshal(approved.Data.Result, &ap))
	require.Equal(t, b.acmeKey, ap.Approver)
	res := runResult(t, next(t, subs["ACME"], contracts.StatusCompleted))
	require.Equal(t, "1\n2\n", res.Stdout)
	require.Equal(t, contracts.StatusApprovalPending, b.last(t, "GLOBEX", id).Data.Status)
	require.Equal(t, contracts.StatusApprovalPending, b.last(t, "", id).Data.Status)

	// GLOBEX's own approver denies GLOBEX's; the default tenant's approver
	// still approves the default tenant's.
	ev = b.decide(t, "GLOBEX", "d9", decision(t, pend["GLOBEX"], shell.Reject, b.gxSeed))
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	denied := next(t, subs["GLOBEX"], contracts.StatusDenied)
	require.Equal(t, contracts.CodeDenied, denied.Data.Error.Code)
	ev = b.decide(t, "", "d10", decision(t, pend[""], shell.Approve, b.defSeed))
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	require.Equal(t, "1\n2\n", runResult(t, next(t, subs[""], contracts.StatusCompleted)).Stdout)
}

// TestTenantExecOutsideTheJob: the events exec writes outside the exec
// job's own handler — an approved background session's, an expired
// approval's denial — go to the tenant's subjects.
func TestTenantExecOutsideTheJob(t *testing.T) {
	t.Parallel()
	b := setupTenants(t, func(c *shellexec.Config) { c.ApprovalTTL = 2 * time.Second })
	bg := b.submit(t, "ACME", shellexec.ToolExec, "bg", map[string]any{"command": "seq 3", "background": true})
	p := pendingOf(t, next(t, bg, contracts.StatusApprovalPending))
	session, err := b.nc.SubscribeSync(contracts.Subjects{}.TenantEvent("ACME", "s1", shellexec.SessionID("bg")))
	require.NoError(t, err)
	ev := b.decide(t, "ACME", "d-bg", decision(t, p, shell.Approve, b.acmeSeed))
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	next(t, bg, contracts.StatusCompleted)
	require.Equal(t, "1\n2\n3\n", runResult(t, next(t, session, contracts.StatusCompleted)).Stdout)

	// Cancelled by its tenant while it waited (the mark the tenant's
	// import writes): the approval ends it cancelled, nothing runs.
	gone := b.submit(t, "ACME", shellexec.ToolExec, "gone", map[string]any{"command": "seq 3"})
	p = pendingOf(t, next(t, gone, contracts.StatusApprovalPending))
	cancels, err := b.js.KeyValue(testutil.Context(t, 5*time.Second), contracts.Subjects{}.CancelsBucket())
	require.NoError(t, err)
	_, err = cancels.Put(testutil.Context(t, 5*time.Second), contracts.CancelKey("ACME", "s1", "gone"), []byte("s1"))
	require.NoError(t, err)
	ev = b.decide(t, "ACME", "d-gone", decision(t, p, shell.Approve, b.acmeSeed))
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	ev = next(t, gone, contracts.StatusCancelled, contracts.StatusApproved)
	require.Equal(t, contracts.StatusCancelled, ev.Data.Status)

	// Nobody decides: the expiry denies the job in its tenant.
	late := b.submit(t, "GLOBEX", shellexec.ToolExec, "late", map[string]any{"command": "seq 3"})
	next(t, late, contracts.StatusApprovalPending)
	ev = next(t, late, contracts.StatusDenied)
	var d shellexec.DeniedResult
	require.NoError(t, json.Unmarshal(ev.Data.Result, &d))
	require.Equal(t, shellexec.ReasonTimeout, d.Reason)
}

// TestOperatorApproversForTenants: with ApproversForTenants the worker's
// own approvers decide tenants' approvals too; the tenant's own still do.
func TestOperatorApproversForTenants(t *testing.T) {
	t.Parallel()
	b := setupTenants(t, func(c *shellexec.Config) { c.ApproversForTenants = true })
	sub := b.submit(t, "ACME", shellexec.ToolExec, "op", map[string]any{"command": "seq 1"})
	p := pendingOf(t, next(t, sub, contracts.StatusApprovalPending))
	// Another tenant's approver is still no approver of ACME's.
	refusedDecision(t, b.decide(t, "ACME", "d1", decision(t, p, shell.Approve, b.gxSeed)), "another tenant's approver")
	ev := b.decide(t, "ACME", "d2", decision(t, p, shell.Approve, b.defSeed))
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	require.Equal(t, "1\n", runResult(t, next(t, sub, contracts.StatusCompleted)).Stdout)
}

// TestTenantCancelsRunningApprovedCommand: a tenant cancels its exec job
// while the approved command runs (the mark and the notice its import
// writes): the command is killed and the job ends cancelled, in the
// tenant's events; likewise an approved background session. Tenants write
// no events, so the worker writes these ends.
func TestTenantCancelsRunningApprovedCommand(t *testing.T) {
	t.Parallel()
	b := setupTenants(t, nil)
	job := b.submit(t, "ACME", shellexec.ToolExec, "long", map[string]any{"command": "sleep 20"})
	p := pendingOf(t, next(t, job, contracts.StatusApprovalPending))
	// The decide job runs the approved command: it is not awaited here.
	b.submit(t, "ACME", shellexec.ToolDecide, "d-long", shellexec.DecideInput{Decision: decision(t, p, shell.Approve, b.acmeSeed)})
	next(t, job, contracts.StatusApproved)
	time.Sleep(300 * time.Millisecond) // the command is running
	ctx := testutil.Context(t, 5*time.Second)
	cancels, err := b.js.KeyValue(ctx, contracts.Subjects{}.CancelsBucket())
	require.NoError(t, err)
	_, err = cancels.Put(ctx, contracts.CancelKey("ACME", "s1", "long"), []byte("s1"))
	require.NoError(t, err)
	require.NoError(t, b.nc.Publish(contracts.Subjects{}.TenantCancel("ACME", "long"), []byte("s1")))
	start := time.Now()
	next(t, job, contracts.StatusCancelled)
	require.Less(t, time.Since(start), 15*time.Second, "the command ran on")

	// The same for an approved background session, cancelled by its id.
	bg := b.submit(t, "ACME", shellexec.ToolExec, "bg-long", map[string]any{"command": "sleep 20", "background": true})
	p = pendingOf(t, next(t, bg, contracts.StatusApprovalPending))
	sid := shellexec.SessionID("bg-long")
	session, err := b.nc.SubscribeSync(contracts.Subjects{}.TenantEvent("ACME", "s1", sid))
	require.NoError(t, err)
	ev := b.decide(t, "ACME", "d-bg-long", decision(t, p, shell.Approve, b.acmeSeed))
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	next(t, bg, contracts.StatusCompleted)
	_, err = cancels.Put(ctx, contracts.CancelKey("ACME", "s1", sid), []byte("s1"))
	require.NoError(t, err)
	require.NoError(t, b.nc.Publish(contracts.Subjects{}.TenantCancel("ACME", sid), []byte("s1")))
	start = time.Now()
	next(t, session, contracts.StatusCancelled)
	require.Less(t, time.Since(start), 15*time.Second, "the session ran on")
}
