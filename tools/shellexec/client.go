package shellexec

import (
	"context"
	"time"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/shell"
)

// LoadApproval reads approval id through p (producer.Approval).
func LoadApproval(ctx context.Context, p *producer.Producer, id string) (*Record, error) {
	return p.Approval(ctx, id)
}

// DecideOpts are the optional fields of a decision.
type DecideOpts struct {
	// Always (approve only) adds the approval's unlisted binaries to the
	// shared allowlist.
	Always bool
	// Reason is shown with a denial.
	Reason string
	// Submit are the options of the exec.decide job (session, progress).
	Submit *producer.SubmitOpts
}

// Decide reads approval id, signs verdict on exactly its plan with the
// approver's nkey seed and submits it. It returns the exec.decide job (await
// it for the outcome) and the approval as read.
func Decide(ctx context.Context, p *producer.Producer, id string, verdict shell.Verdict, seed []byte, opts *DecideOpts) (*contracts.Job, *Record, error) {
	var o DecideOpts
	if opts != nil {
		o = *opts
	}
	rec, err := LoadApproval(ctx, p, id)
	if err != nil {
		return nil, nil, err
	}
	d, err := shell.SignDecision(shell.NewDecision(&rec.Approval, verdict, o.Always, o.Reason, time.Now()), seed)
	if err != nil {
		return nil, rec, err
	}
	job, err := p.Decide(ctx, &d, o.Submit)
	return job, rec, err
}
