package contracts

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sort"
	"strconv"
	"time"
)

// ExecPlan is exactly what an exec command runs: the worker builds it once
// and an approval binds it by hash, so an approved command runs as approved.
type ExecPlan struct {
	// Command is the job's text, for people.
	Command string `json:"command"`
	// Script is the shell text that runs.
	Script string `json:"script"`
	// Shell is the absolute path of the shell that runs Script with -c.
	Shell string `json:"shell"`
	// Argv is the resolved argv of each simple command, for people and the
	// approval hash.
	Argv [][]string `json:"argv,omitempty"`
	// Workdir is absolute; empty means a private scratch directory.
	Workdir string `json:"workdir,omitempty"`
	// Env are the job's overrides (already checked).
	Env map[string]string `json:"env,omitempty"`
	// Path is the fixed PATH.
	Path []string `json:"path"`
	// Host is sandbox or worker.
	Host ExecHost `json:"host"`
	// TimeoutMs bounds the run.
	TimeoutMs int64 `json:"timeoutMs"`
}

// Hash is the canonical hash of the plan: hex SHA-256 over a length-prefixed
// encoding of every field, env sorted by name. Two plans hash alike only when
// they would run the same thing in the same place with the same env.
func (pl *ExecPlan) Hash() string {
	h := sha256.New()
	var buf [binary.MaxVarintLen64]byte
	put := func(s string) {
		n := binary.PutUvarint(buf[:], uint64(len(s)))
		h.Write(buf[:n])
		h.Write([]byte(s))
	}
	putN := func(n int) { put(strconv.Itoa(n)) }
	put("toolq.exec.plan.v1")
	put(pl.Command)
	put(pl.Script)
	put(pl.Shell)
	putN(len(pl.Argv))
	for _, a := range pl.Argv {
		putN(len(a))
		for _, s := range a {
			put(s)
		}
	}
	put(pl.Workdir)
	keys := make([]string, 0, len(pl.Env))
	for k := range pl.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	putN(len(keys))
	for _, k := range keys {
		put(k)
		put(pl.Env[k])
	}
	putN(len(pl.Path))
	for _, d := range pl.Path {
		put(d)
	}
	put(string(pl.Host))
	put(strconv.FormatInt(pl.TimeoutMs, 10))
	return hex.EncodeToString(h.Sum(nil))
}

// ExecApproval is a command waiting for a person: what runs when approved,
// bound by its hash, and how long the approval lives.
type ExecApproval struct {
	// ID is a subject-safe id ([A-Za-z0-9_-]{1,128}); see ExecApprovalID.
	ID string `json:"id"`
	// Tenant is the tenant of the approval's job ("" for the default one),
	// as the worker read it from the subject the job arrived on. Approval
	// ids are unique within a tenant only; the record's key in the
	// approvals bucket is ExecApprovalKey(Tenant, ID).
	Tenant string `json:"tenant,omitempty"`
	// Session and JobID link the approval to its job's events.
	Session string `json:"session,omitempty"`
	JobID   string `json:"jobId,omitempty"`
	// Plan is what runs when approved.
	Plan ExecPlan `json:"plan"`
	// Reason and Misses say why the policy asked; Unlisted is what an
	// "always" approval adds to the allowlist.
	Reason   string   `json:"reason,omitempty"`
	Misses   []string `json:"misses,omitempty"`
	Unlisted []string `json:"unlisted,omitempty"`
	// CreatedAt and ExpiresAt bound the approval's life.
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	// Hash is Plan.Hash() at creation.
	Hash string `json:"hash"`
}

// ExecVerdict is a person's answer to an approval.
type ExecVerdict string

// Exec verdicts.
const (
	ExecApprove ExecVerdict = "approve"
	ExecReject  ExecVerdict = "deny"
)

// ExecMaxReasonBytes bounds a decision's reason.
const ExecMaxReasonBytes = 1024

// ExecDecision is a person's signed answer to one approval. It binds the
// approval id and the plan hash, so it cannot be replayed for another
// approval or another command. The worker accepts it only with a valid
// signature from a trusted approver key.
type ExecDecision struct {
	// Tenant is the tenant of the approval ("" for the default one). A
	// decision for a named tenant is signed with it (SigningPayload v2), so
	// it cannot decide another tenant's approval of the same id and plan.
	Tenant     string      `json:"tenant,omitempty"`
	ApprovalID string      `json:"approvalId"`
	Hash       string      `json:"hash"`
	Verdict    ExecVerdict `json:"verdict"`
	// Always (approve only) asks to add the approval's unlisted binaries to
	// the allowlist.
	Always bool   `json:"always,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Approver is the nkey public key (user "U…" or account "A…").
	Approver string    `json:"approver"`
	IssuedAt time.Time `json:"issuedAt"`
	// Nonce makes every decision unique (at most 128 bytes).
	Nonce string `json:"nonce"`
	// Signature is the ed25519 signature of SigningPayload by the
	// Approver's key, base64url without padding.
	Signature string `json:"signature"`
}

// NewExecDecision prepares an unsigned decision on approval a. Sign it
// over SigningPayload, after setting Approver and Nonce.
func NewExecDecision(a *ExecApproval, v ExecVerdict, always bool, reason string, now time.Time) ExecDecision {
	return ExecDecision{
		Tenant: a.Tenant, ApprovalID: a.ID, Hash: a.Hash, Verdict: v, Always: always, Reason: reason,
		IssuedAt: now.UTC(),
	}
}

// SigningPayload is the canonical byte string the signature covers: every
// field but the signature, length-prefixed. A decision of the default
// tenant keeps the v1 payload (no tenant: signatures made before tenants
// still verify, and can only match an approval without a tenant); one of
// a named tenant is v2, with the tenant right after the label. The labels
// differ, so no v1 payload reads as a v2 one.
func (d *ExecDecision) SigningPayload() []byte {
	var out []byte
	var buf [binary.MaxVarintLen64]byte
	put := func(s string) {
		n := binary.PutUvarint(buf[:], uint64(len(s)))
		out = append(out, buf[:n]...)
		out = append(out, s...)
	}
	if d.Tenant == "" {
		put("toolq.exec.decision.v1")
	} else {
		put("toolq.exec.decision.v2")
		put(d.Tenant)
	}
	put(d.ApprovalID)
	put(d.Hash)
	put(string(d.Verdict))
	put(strconv.FormatBool(d.Always))
	put(d.Reason)
	put(d.Approver)
	put(strconv.FormatInt(d.IssuedAt.UnixNano(), 10))
	put(d.Nonce)
	return out
}

// Statuses of an ExecApprovalRecord.
const (
	ExecApprovalPending   = "pending"
	ExecApprovalApproved  = "approved"
	ExecApprovalDenied    = "denied"
	ExecApprovalCancelled = "cancelled"
)

// ExecApprovalKey is the key of tenant's approval id in the approvals
// bucket: the id for the default tenant, <tenant>.<id> otherwise
// (TenantKey), so two tenants' approvals of the same id never share a key.
func ExecApprovalKey(tenant, id string) string { return TenantKey(tenant, id) }

// ExecApprovalRecord is an approval as kept in the approvals bucket
// (Subjects.ApprovalsBucket) under ExecApprovalKey(tenant, id). It is created pending with the
// approval's TTL (its expiry denies the job with reason timeout) and
// decided once, by a write conditional on the revision read.
type ExecApprovalRecord struct {
	Approval ExecApproval `json:"approval"`
	// Tool is the job's tool (exec).
	Tool string `json:"tool"`
	// Background runs the approved command as a background session.
	Background bool `json:"background,omitempty"`
	// Status is one of ExecApprovalPending, …Approved, …Denied, …Cancelled.
	Status string `json:"status"`
	// Decision is the signed decision that decided the approval; DecideJob
	// is the exec.decide job that applied it.
	Decision  *ExecDecision `json:"decision,omitempty"`
	DecideJob string        `json:"decideJob,omitempty"`
	DecidedAt time.Time     `json:"decidedAt,omitzero"`
	// TraceParent is the W3C traceparent of the exec job's span while it
	// waited, so the wait and the decision join the job's trace.
	TraceParent string `json:"traceparent,omitempty"`
}

// ExecDecideInput is the input of an exec.decide job.
type ExecDecideInput struct {
	Decision ExecDecision `json:"decision"`
}

// ExecDecideResult is the completed result of an exec.decide job.
type ExecDecideResult struct {
	ApprovalID string `json:"approvalId"`
	// Applied is false when the approval had already been decided (a
	// second or replayed decision) or its job had ended.
	Applied bool `json:"applied"`
	// Status is the approval's status after this decision.
	Status string `json:"status"`
	// JobID and Session are the exec job's.
	JobID   string `json:"jobId"`
	Session string `json:"session"`
}
