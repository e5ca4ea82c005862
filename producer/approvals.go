package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// ErrNoApproval is returned by Approval for an approval that does not exist
// (never made, or expired).
var ErrNoApproval = errors.New("producer: no such approval")

// Approval returns the record of approval id from the approvals bucket, as
// the exec worker wrote it (tools/shellexec.Record: the approval with its
// plan and hash, and its status). An approver reads it to sign a decision
// for exactly that plan.
func (p *Producer) Approval(ctx context.Context, id string) (json.RawMessage, error) {
	if err := contracts.ValidateID("approval id", id); err != nil {
		return nil, err
	}
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
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
	return json.RawMessage(e.Value()), nil
}

// Decide submits a signed decision on an approval — the JSON of a
// shell.ApprovalDecision — as an exec.decide job. Await the job:
// it completes with the decision's outcome (once an approved command has
// run), or fails with code denied when the worker refuses the decision
// (unsigned, unknown approver, another command, expired). With
// opts.Progress the job also writes a progress event as soon as the
// decision is applied.
func (p *Producer) Decide(ctx context.Context, decision json.RawMessage, opts *SubmitOpts) (*contracts.Job, error) {
	if !json.Valid(decision) {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "decision is not valid JSON")
	}
	input, err := json.Marshal(struct {
		Decision json.RawMessage `json:"decision"`
	}{decision})
	if err != nil {
		return nil, err
	}
	return p.Submit(ctx, contracts.ToolExecDecide, input, opts)
}
