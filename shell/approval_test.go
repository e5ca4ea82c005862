package shell

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

type approvalBundle struct {
	policy   Policy
	plan     *Plan
	approval *Approval
	seed     []byte // a trusted user approver
	acctSeed []byte // a trusted account approver
	trusted  []string
	now      time.Time
}

func newSeed(t *testing.T, create func() (nkeys.KeyPair, error)) ([]byte, string) {
	t.Helper()
	kp, err := create()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	return seed, pub
}

func setupApproval(t *testing.T) *approvalBundle {
	t.Helper()
	pb := setupPolicy(t)
	in := &Input{Command: "rm -rf build && ls", Workdir: pb.work, Env: map[string]string{"TZ": "UTC"}}
	in.ApplyDefaults()
	d := Evaluate(pb.policy, in)
	require.Equal(t, NeedsApproval, d.Outcome, d.Reason)
	pb.policy.Shell = "sh"
	plan, err := NewPlan(pb.policy, in, &d)
	require.NoError(t, err)
	now := time.Date(2026, 1, 2, 3, 4, 5, 678, time.UTC)
	a, err := NewApproval("appr_1", plan, &d, now, 10*time.Minute)
	require.NoError(t, err)
	seed, pub := newSeed(t, nkeys.CreateUser)
	acctSeed, acctPub := newSeed(t, nkeys.CreateAccount)
	return &approvalBundle{
		policy: pb.policy, plan: plan, approval: a, seed: seed, acctSeed: acctSeed,
		trusted: []string{pub, acctPub}, now: now.Add(time.Minute),
	}
}

func (b *approvalBundle) sign(t *testing.T, a *Approval, v Verdict, seed []byte) ApprovalDecision {
	t.Helper()
	d, err := SignDecision(NewDecision(a, v, false, "ok", b.now), seed)
	require.NoError(t, err)
	return d
}

func TestApprovalRecord(t *testing.T) {
	t.Parallel()
	b := setupApproval(t)
	a := b.approval
	require.Equal(t, b.plan.Hash(), a.Hash)
	require.Equal(t, []string{b.plan.Argv[0][0]}, a.Unlisted)
	require.Equal(t, "rm -rf build && ls", a.Plan.Command)
	require.Equal(t, [][]string{{a.Plan.Argv[0][0], "-rf", "build"}, {a.Plan.Argv[1][0]}}, a.Plan.Argv)
	require.Equal(t, b.now.Add(-time.Minute).Add(10*time.Minute), a.ExpiresAt)

	// A JSON round trip (the KV value) keeps the hash valid.
	raw, err := json.Marshal(a)
	require.NoError(t, err)
	var back Approval
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Equal(t, a.Hash, back.Plan.Hash())

	_, err = NewApproval("bad id", b.plan, &Decision{Outcome: NeedsApproval}, b.now, time.Minute)
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
	_, err = NewApproval("x", b.plan, &Decision{Outcome: Allow}, b.now, time.Minute)
	require.Error(t, err)
	_, err = NewPlan(b.policy, &Input{Command: "x"}, &Decision{Outcome: Deny, Reason: "no"})
	require.ErrorIs(t, err, contracts.ErrDenied)
	p := b.policy
	p.Shell = "no-such-shell"
	_, err = NewPlan(p, &Input{Command: "x"}, &Decision{Outcome: Allow})
	require.ErrorIs(t, err, contracts.ErrRuntimeUnavailable)
}

func TestPlanHashBindsEverything(t *testing.T) {
	t.Parallel()
	base := Plan{
		Command: "ls a", Script: "'/bin/ls' 'a'", Shell: "/bin/sh", Argv: [][]string{{"/bin/ls", "a"}},
		Workdir: "/w", Env: map[string]string{"A": "1", "B": "2"}, Path: []string{"/bin"}, Host: HostSandbox, TimeoutMs: 1000,
	}
	h := base.Hash()
	same := base
	same.Env = map[string]string{"B": "2", "A": "1"}
	require.Equal(t, h, same.Hash(), "env order does not matter")

	muts := map[string]func(p *Plan){
		"command":      func(p *Plan) { p.Command = "ls b" },
		"script":       func(p *Plan) { p.Script = "'/bin/ls' 'b'" },
		"shell":        func(p *Plan) { p.Shell = "/bin/bash" },
		"argv":         func(p *Plan) { p.Argv = [][]string{{"/bin/ls", "b"}} },
		"argv split":   func(p *Plan) { p.Argv = [][]string{{"/bin/ls a"}} },
		"argv regroup": func(p *Plan) { p.Argv = [][]string{{"/bin/ls"}, {"a"}} },
		"workdir":      func(p *Plan) { p.Workdir = "/w2" },
		"env value":    func(p *Plan) { p.Env = map[string]string{"A": "1", "B": "3"} },
		"env key":      func(p *Plan) { p.Env = map[string]string{"A": "1", "C": "2"} },
		"env shift":    func(p *Plan) { p.Env = map[string]string{"A": "1B", "": "2"} },
		"env added":    func(p *Plan) { p.Env = map[string]string{"A": "1", "B": "2", "C": ""} },
		"path":         func(p *Plan) { p.Path = []string{"/tmp"} },
		"host":         func(p *Plan) { p.Host = HostWorker },
		"timeout":      func(p *Plan) { p.TimeoutMs = 2000 },
	}
	seen := map[string]string{h: "base"}
	for name, mut := range muts {
		p := base
		mut(&p)
		got := p.Hash()
		prev, dup := seen[got]
		require.False(t, dup, "%s hashes like %s", name, prev)
		seen[got] = name
	}
}

func TestVerifyDecision(t *testing.T) {
	t.Parallel()
	b := setupApproval(t)
	a := b.approval

	t.Run("approve by a user key", func(t *testing.T) {
		t.Parallel()
		d := b.sign(t, a, Approve, b.seed)
		require.NoError(t, VerifyDecision(&d, a, b.trusted, b.now))
	})
	t.Run("deny by an account key", func(t *testing.T) {
		t.Parallel()
		d := b.sign(t, a, Reject, b.acctSeed)
		require.NoError(t, VerifyDecision(&d, a, b.trusted, b.now))
	})
	t.Run("survives a JSON round trip", func(t *testing.T) {
		t.Parallel()
		d := b.sign(t, a, Approve, b.seed)
		raw, err := json.Marshal(d)
		require.NoError(t, err)
		var back ApprovalDecision
		require.NoError(t, json.Unmarshal(raw, &back))
		require.NoError(t, VerifyDecision(&back, a, b.trusted, b.now))
	})
	t.Run("unsigned", func(t *testing.T) {
		t.Parallel()
		d := NewDecision(a, Approve, false, "", b.now)
		require.ErrorIs(t, VerifyDecision(&d, a, b.trusted, b.now), ErrUnsigned)
		d = b.sign(t, a, Approve, b.seed)
		d.Signature = ""
		require.ErrorIs(t, VerifyDecision(&d, a, b.trusted, b.now), ErrUnsigned)
		require.ErrorIs(t, VerifyDecision(nil, a, b.trusted, b.now), ErrUnsigned)
	})
	t.Run("tampered after signing", func(t *testing.T) {
		t.Parallel()
		d := b.sign(t, a, Reject, b.seed)
		d.Verdict = Approve
		require.ErrorIs(t, VerifyDecision(&d, a, b.trusted, b.now), ErrBadSignature)
		d = b.sign(t, a, Approve, b.seed)
		d.Always = true
		require.ErrorIs(t, VerifyDecision(&d, a, b.trusted, b.now), ErrBadSignature)
		d = b.sign(t, a, Approve, b.seed)
		d.IssuedAt = d.IssuedAt.Add(time.Nanosecond)
		require.ErrorIs(t, VerifyDecision(&d, a, b.trusted, b.now), ErrBadSignature)
		d = b.sign(t, a, Approve, b.seed)
		d.Signature = "!!!"
		require.ErrorIs(t, VerifyDecision(&d, a, b.trusted, b.now), ErrBadSignature)
	})
	t.Run("signature of another key under a trusted name", func(t *testing.T) {
		t.Parallel()
		d := b.sign(t, a, Approve, b.acctSeed)
		d.Approver = b.trusted[0] // claims to be the user approver
		require.ErrorIs(t, VerifyDecision(&d, a, b.trusted, b.now), ErrBadSignature)
	})
	t.Run("unknown approver", func(t *testing.T) {
		t.Parallel()
		other, _ := newSeed(t, nkeys.CreateUser)
		d := b.sign(t, a, Approve, other)
		require.ErrorIs(t, VerifyDecision(&d, a, b.trusted, b.now), ErrUnknownApprover)
		require.ErrorIs(t, VerifyDecision(&d, a, nil, b.now), ErrUnknownApprover)
	})
	t.Run("server key is not an approver", func(t *testing.T) {
		t.Parallel()
		srv, srvPub := newSeed(t, nkeys.CreateServer)
		_, err := SignDecision(NewDecision(a, Approve, false, "", b.now), srv)
		require.Error(t, err)
		d := b.sign(t, a, Approve, b.seed)
		d.Approver = srvPub
		require.ErrorIs(t, VerifyDecision(&d, a, append(b.trusted, srvPub), b.now), ErrUnknownApprover)
	})
	t.Run("replay for another approval", func(t *testing.T) {
		t.Parallel()
		d := b.sign(t, a, Approve, b.seed)
		other := *a
		other.ID = "appr_2"
		require.ErrorIs(t, VerifyDecision(&d, &other, b.trusted, b.now), ErrWrongApproval)
	})
	t.Run("replay for another tenant's approval of the same id", func(t *testing.T) {
		t.Parallel()
		acme := *a
		acme.Tenant = "ACME"
		d := b.sign(t, &acme, Approve, b.seed)
		require.Equal(t, "ACME", d.Tenant)
		require.NoError(t, VerifyDecision(&d, &acme, b.trusted, b.now))
		globex := acme
		globex.Tenant = "GLOBEX"
		require.ErrorIs(t, VerifyDecision(&d, &globex, b.trusted, b.now), ErrWrongApproval)
		require.ErrorIs(t, VerifyDecision(&d, a, b.trusted, b.now), ErrWrongApproval)
		// The tenant is under the signature: re-labelled, it fails.
		d.Tenant = "GLOBEX"
		require.ErrorIs(t, VerifyDecision(&d, &globex, b.trusted, b.now), ErrBadSignature)
		d.Tenant = ""
		require.ErrorIs(t, VerifyDecision(&d, a, b.trusted, b.now), ErrBadSignature)
	})
	t.Run("decision for a different argv", func(t *testing.T) {
		t.Parallel()
		// The same approval id, but the record now binds another command:
		// a decision signed for the first command does not carry over.
		d := b.sign(t, a, Approve, b.seed)
		plan := a.Plan
		plan.Argv = [][]string{{"/bin/rm", "-rf", "/"}}
		plan.Script = "'/bin/rm' '-rf' '/'"
		other, err := NewApproval(a.ID, &plan, &Decision{Outcome: NeedsApproval}, a.CreatedAt, time.Hour)
		require.NoError(t, err)
		require.ErrorIs(t, VerifyDecision(&d, other, b.trusted, b.now), ErrWrongApproval)
	})
	t.Run("approval record changed under its hash", func(t *testing.T) {
		t.Parallel()
		d := b.sign(t, a, Approve, b.seed)
		tampered := *a
		tampered.Plan.Env = map[string]string{"A": "2"}
		require.ErrorIs(t, VerifyDecision(&d, &tampered, b.trusted, b.now), ErrTamperedApproval)
	})
	t.Run("expired", func(t *testing.T) {
		t.Parallel()
		d := b.sign(t, a, Approve, b.seed)
		require.ErrorIs(t, VerifyDecision(&d, a, b.trusted, a.ExpiresAt), ErrExpired)
		require.ErrorIs(t, VerifyDecision(&d, a, b.trusted, a.ExpiresAt.Add(time.Hour)), ErrExpired)
	})
	t.Run("issued before the approval existed", func(t *testing.T) {
		t.Parallel()
		d, err := SignDecision(NewDecision(a, Approve, false, "", a.CreatedAt.Add(-time.Hour)), b.seed)
		require.NoError(t, err)
		require.ErrorIs(t, VerifyDecision(&d, a, b.trusted, b.now), ErrExpired)
	})
	t.Run("issued in the future", func(t *testing.T) {
		t.Parallel()
		d, err := SignDecision(NewDecision(a, Approve, false, "", b.now.Add(time.Hour)), b.seed)
		require.NoError(t, err)
		require.ErrorIs(t, VerifyDecision(&d, a, b.trusted, b.now), ErrExpired)
	})
	t.Run("malformed", func(t *testing.T) {
		t.Parallel()
		_, err := SignDecision(NewDecision(a, Reject, true, "", b.now), b.seed)
		require.ErrorIs(t, err, ErrMalformedDecision, "always is only for approve")
		_, err = SignDecision(NewDecision(a, "maybe", false, "", b.now), b.seed)
		require.ErrorIs(t, err, ErrMalformedDecision)
		_, err = SignDecision(ApprovalDecision{ApprovalID: a.ID, Hash: a.Hash, Verdict: Approve}, b.seed)
		require.ErrorIs(t, err, ErrMalformedDecision, "no issuedAt")
		_, err = SignDecision(NewDecision(a, Approve, false, "", b.now), []byte("SUNOTASEED"))
		require.Error(t, err)
	})
	t.Run("nonces differ", func(t *testing.T) {
		t.Parallel()
		d1 := b.sign(t, a, Approve, b.seed)
		d2 := b.sign(t, a, Approve, b.seed)
		require.NotEqual(t, d1.Nonce, d2.Nonce)
		require.NotEqual(t, d1.Signature, d2.Signature)
	})
}
