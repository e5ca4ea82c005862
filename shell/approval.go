package shell

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/toolq/toolq/contracts"
)

// Plan is exactly what runs: the bus layer builds it once (NewPlan) and an
// approval binds it by hash (Plan.Hash), so an approved command runs as
// approved. Script is Decision.Script.
type Plan = contracts.ExecPlan

// NewPlan builds the plan of an allowed or approvable decision. It fails
// with runtime_unavailable when the policy's shell is missing and with
// denied when d is a Deny.
func NewPlan(p Policy, in *Input, d *Decision) (*Plan, error) {
	if d.Outcome == Deny {
		return nil, contracts.Errorf(contracts.CodeDenied, "%s", d.Reason)
	}
	sh, ok := p.ResolveShell()
	if !ok {
		return nil, contracts.Errorf(contracts.CodeRuntimeUnavailable, "shell %q is not found on the fixed PATH", p.Shell)
	}
	host := in.Host
	if host == "" {
		host = HostSandbox
	}
	var env map[string]string
	if len(in.Env) > 0 {
		env = make(map[string]string, len(in.Env))
		for k, v := range in.Env {
			env[k] = v
		}
	}
	argv := make([][]string, len(d.Argv))
	for i, a := range d.Argv {
		argv[i] = slices.Clone(a)
	}
	return &Plan{
		Command:   in.Command,
		Script:    d.Script,
		Shell:     sh,
		Argv:      argv,
		Workdir:   d.Workdir,
		Env:       env,
		Path:      slices.Clone(p.path()),
		Host:      host,
		TimeoutMs: in.TimeoutDuration().Milliseconds(),
	}, nil
}

// Approval defaults for the bus layer.
const (
	// DefaultApprovalTTL is how long an approval waits for a person.
	DefaultApprovalTTL = 30 * time.Minute
	// DefaultRunningNoticeMs is approvalRunningNoticeMs of the exec contract: one
	// running notice when an approved command runs longer (0 disables).
	DefaultRunningNoticeMs = 10000
)

// Approval is the record of a command waiting for a person (the value in
// the toolq_approvals bucket, keyed by ID).
type Approval = contracts.ExecApproval

// NewApproval makes the record for a NeedsApproval decision.
func NewApproval(id string, plan *Plan, d *Decision, now time.Time, ttl time.Duration) (*Approval, error) {
	if err := contracts.ValidateID("approval id", id); err != nil {
		return nil, err
	}
	if d.Outcome != NeedsApproval {
		return nil, fmt.Errorf("shell: approval for a %q decision", d.Outcome)
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("shell: approval ttl must be positive")
	}
	now = now.UTC()
	return &Approval{
		ID:        id,
		Plan:      *plan,
		Reason:    d.Reason,
		Misses:    slices.Clone(d.Misses),
		Unlisted:  slices.Clone(d.Unlisted),
		CreatedAt: now,
		ExpiresAt: now.Add(ttl),
		Hash:      plan.Hash(),
	}, nil
}

// Verdict is a person's answer.
type Verdict = contracts.ExecVerdict

// Verdicts.
const (
	Approve = contracts.ExecApprove
	Reject  = contracts.ExecReject
)

// MaxReasonBytes bounds a decision's reason.
const MaxReasonBytes = contracts.ExecMaxReasonBytes

// ApprovalDecision is a person's signed answer to one approval. It binds
// the approval id and the plan hash, so it cannot be replayed for another
// approval or another command. Signature is the ed25519 signature of
// SigningPayload, base64url without padding.
type ApprovalDecision = contracts.ExecDecision

// NewDecision prepares an unsigned decision for approval a.
func NewDecision(a *Approval, v Verdict, always bool, reason string, now time.Time) ApprovalDecision {
	return contracts.NewExecDecision(a, v, always, reason, now)
}

// SignDecision signs d with an nkey seed (user or account). It sets Approver
// to the contract's public key and a random Nonce when d has none.
func SignDecision(d ApprovalDecision, seed []byte) (ApprovalDecision, error) {
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return d, fmt.Errorf("shell: approver seed: %w", err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return d, fmt.Errorf("shell: approver seed: %w", err)
	}
	if !approverKey(pub) {
		return d, fmt.Errorf("shell: approver seed must be a user or account nkey")
	}
	d.Approver = pub
	if d.Nonce == "" {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return d, fmt.Errorf("shell: nonce: %w", err)
		}
		d.Nonce = base64.RawURLEncoding.EncodeToString(b[:])
	}
	if err := checkShape(&d); err != nil {
		return d, err
	}
	sig, err := kp.Sign(d.SigningPayload())
	if err != nil {
		return d, fmt.Errorf("shell: sign decision: %w", err)
	}
	d.Signature = base64.RawURLEncoding.EncodeToString(sig)
	return d, nil
}

func approverKey(pub string) bool {
	return nkeys.IsValidPublicUserKey(pub) || nkeys.IsValidPublicAccountKey(pub)
}

func checkShape(d *ApprovalDecision) error {
	switch {
	case !contracts.ValidID(d.ApprovalID):
		return fmt.Errorf("%w: approval id", ErrMalformedDecision)
	case d.Tenant != "" && !contracts.ValidID(d.Tenant):
		return fmt.Errorf("%w: tenant", ErrMalformedDecision)
	case d.Verdict != Approve && d.Verdict != Reject:
		return fmt.Errorf("%w: verdict %q", ErrMalformedDecision, clip(string(d.Verdict)))
	case d.Always && d.Verdict != Approve:
		return fmt.Errorf("%w: always is only for approve", ErrMalformedDecision)
	case len(d.Reason) > MaxReasonBytes:
		return fmt.Errorf("%w: reason longer than %d bytes", ErrMalformedDecision, MaxReasonBytes)
	case d.Nonce == "" || len(d.Nonce) > 128:
		return fmt.Errorf("%w: nonce", ErrMalformedDecision)
	case d.IssuedAt.IsZero():
		return fmt.Errorf("%w: issuedAt", ErrMalformedDecision)
	}
	return nil
}

// ClockSkew is how far a decision's IssuedAt may lie before the approval's
// creation or after now.
const ClockSkew = 2 * time.Minute

// VerifyDecision checks that d is a valid, signed answer to approval a from
// one of the trusted approver public keys, at time now: trusted must be
// the approvers of a's tenant, and d must name that tenant. It is pure: "decide
// once" is the bus layer's CAS on the approval record.
func VerifyDecision(d *ApprovalDecision, a *Approval, trusted []string, now time.Time) error {
	if d == nil || a == nil {
		return ErrUnsigned
	}
	if d.Signature == "" || d.Approver == "" {
		return ErrUnsigned
	}
	if !slices.Contains(trusted, d.Approver) || !approverKey(d.Approver) {
		return ErrUnknownApprover
	}
	sig, err := base64.RawURLEncoding.DecodeString(d.Signature)
	if err != nil {
		return fmt.Errorf("%w: signature encoding", ErrBadSignature)
	}
	kp, err := nkeys.FromPublicKey(d.Approver)
	if err != nil {
		return ErrUnknownApprover
	}
	if err := kp.Verify(d.SigningPayload(), sig); err != nil {
		return ErrBadSignature
	}
	if err := checkShape(d); err != nil {
		return err
	}
	if d.Tenant != a.Tenant {
		return fmt.Errorf("%w: decision for the approval of another tenant", ErrWrongApproval)
	}
	if d.ApprovalID != a.ID {
		return fmt.Errorf("%w: decision for approval %q", ErrWrongApproval, clip(d.ApprovalID))
	}
	if d.Hash != a.Hash {
		return fmt.Errorf("%w: decision for another command (hash)", ErrWrongApproval)
	}
	if a.Plan.Hash() != a.Hash {
		return ErrTamperedApproval
	}
	if !now.Before(a.ExpiresAt) {
		return ErrExpired
	}
	if d.IssuedAt.Before(a.CreatedAt.Add(-ClockSkew)) || d.IssuedAt.After(a.ExpiresAt) || d.IssuedAt.After(now.Add(ClockSkew)) {
		return fmt.Errorf("%w: decision issued outside the approval's life", ErrExpired)
	}
	return nil
}
