package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// SubmitExec enqueues an exec job: a shell command run under the worker's
// policy. The input's shape is checked first (invalid_input); the policy
// is the worker's. Await the job with AwaitOpts.Parked to see an
// approval_pending event (its ExecPendingResult names the approval) and
// read its end with ExecResult.
func (p *Producer) SubmitExec(ctx context.Context, in *contracts.ExecInput, opts *SubmitOpts) (*contracts.Job, error) {
	if in == nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "exec needs an input")
	}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	data, err := json.Marshal(in)
	if err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "exec input cannot be encoded: %v", err)
	}
	if len(data) > contracts.ExecMaxInputBytes {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "input is %d bytes, more than %d", len(data), contracts.ExecMaxInputBytes)
	}
	return p.Submit(ctx, contracts.ToolExec, data, opts)
}

// Approval returns the record of approval id from the approvals bucket, as
// the exec worker wrote it: the approval with its plan and hash, and its
// status. An approver reads it to sign a decision for exactly that plan
// (contracts.NewExecDecision, then a signature over its SigningPayload).
// It returns ErrNoApproval for an approval that does not exist.
//
// On a tenant account (Config.TenantAccount) the bucket is out of reach:
// the record is rebuilt from the job's approval_pending event, read by the
// imported direct get among the tenant's own events, and only a pending
// approval is found (ErrNoApproval otherwise).
func (p *Producer) Approval(ctx context.Context, id string) (*contracts.ExecApprovalRecord, error) {
	if err := contracts.ValidateID("approval id", id); err != nil {
		return nil, err
	}
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	if p.cfg.TenantAccount {
		return p.pendingApproval(ctx, id)
	}
	kv, err := p.js.KeyValue(ctx, p.cfg.Subjects.ApprovalsBucket())
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("%w: %s", ErrNoApproval, id)
		}
		return nil, fmt.Errorf("producer: approvals bucket: %w", err)
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("%w: %s", ErrNoApproval, id)
		}
		return nil, fmt.Errorf("producer: approval %s: %w", id, err)
	}
	var rec contracts.ExecApprovalRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, fmt.Errorf("producer: approval record %s: %w", id, err)
	}
	return &rec, nil
}

// pendingApproval rebuilds approval id from its job's approval_pending
// event (the approval id is the job id; the session is any of the
// tenant's).
func (p *Producer) pendingApproval(ctx context.Context, id string) (*contracts.ExecApprovalRecord, error) {
	if err := p.init(ctx); err != nil {
		return nil, err
	}
	ev, _, err := p.events.Last(ctx, "*", id)
	if err != nil {
		return nil, fmt.Errorf("producer: approval %s: %w", id, err)
	}
	if ev == nil || ev.Data.Status != contracts.StatusApprovalPending || ev.Data.JobID != id {
		return nil, fmt.Errorf("%w: %s (no exec job of this id waits for approval)", ErrNoApproval, id)
	}
	var pr contracts.ExecPendingResult
	if err := json.Unmarshal(ev.Data.Result, &pr); err != nil {
		return nil, fmt.Errorf("producer: approval %s: pending event: %w", id, err)
	}
	if pr.ApprovalID != id {
		return nil, fmt.Errorf("%w: %s (its pending event names approval %q)", ErrNoApproval, id, pr.ApprovalID)
	}
	return &contracts.ExecApprovalRecord{
		Approval: contracts.ExecApproval{
			ID: pr.ApprovalID, Tenant: pr.Tenant, Session: ev.Data.Session, JobID: ev.Data.JobID,
			Plan: pr.Plan(), Reason: pr.Reason, Misses: pr.Misses, Unlisted: pr.Unlisted,
			CreatedAt: pr.CreatedAt, ExpiresAt: pr.ExpiresAt, Hash: pr.Hash,
		},
		Tool: ev.Data.Tool, Background: pr.Background, Status: contracts.ExecApprovalPending,
	}, nil
}

// Decide submits a signed decision on an approval as an exec.decide job.
// The producer does not sign: the approver signs d's SigningPayload with
// their nkey (shell.SignDecision does it from a seed). A decision without
// an approval id, a verdict, an approver or a signature is refused here
// with invalid_input. Await the job: it completes with an ExecDecideResult
// (once an approved command has run), or fails with code denied when the
// worker refuses the decision (bad signature, unknown approver, another
// command, expired). With opts.Progress the job also writes a progress
// event as soon as the decision is applied.
func (p *Producer) Decide(ctx context.Context, d *contracts.ExecDecision, opts *SubmitOpts) (*contracts.Job, error) {
	switch {
	case d == nil:
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "no decision")
	case !contracts.ValidID(d.ApprovalID):
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "decision approval id %q is not a valid id", d.ApprovalID)
	case d.Verdict != contracts.ExecApprove && d.Verdict != contracts.ExecReject:
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "decision verdict %q: want approve or deny", d.Verdict)
	case d.Approver == "" || d.Signature == "":
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "decision is not signed")
	}
	input, err := json.Marshal(contracts.ExecDecideInput{Decision: *d})
	if err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "decision cannot be encoded: %v", err)
	}
	return p.Submit(ctx, contracts.ToolExecDecide, input, opts)
}
