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
// it for the outcome) and the approval as read. A caller that shows the
// plan to a person first uses LoadApproval and DecideRecord.
func Decide(ctx context.Context, p *producer.Producer, id string, verdict shell.Verdict, seed []byte, opts *DecideOpts) (*contracts.Job, *Record, error) {
	rec, err := LoadApproval(ctx, p, id)
	if err != nil {
		return nil, nil, err
	}
	job, err := DecideRecord(ctx, p, rec, verdict, seed, opts)
	return job, rec, err
}

// DecideRecord signs verdict on exactly the plan of rec, an approval as
// read with LoadApproval, and submits it. It refuses a record whose plan
// does not hash to the hash it carries (what would be signed is not what
// was shown).
func DecideRecord(ctx context.Context, p *producer.Producer, rec *Record, verdict shell.Verdict, seed []byte, opts *DecideOpts) (*contracts.Job, error) {
	var o DecideOpts
	if opts != nil {
		o = *opts
	}
	if rec.Approval.Plan.Hash() != rec.Approval.Hash {
		return nil, contracts.Errorf(contracts.CodeDenied, "approval %s: its plan does not match its hash", rec.Approval.ID)
	}
	d, err := shell.SignDecision(shell.NewDecision(&rec.Approval, verdict, o.Always, o.Reason, time.Now()), seed)
	if err != nil {
		return nil, err
	}
	return p.Decide(ctx, &d, o.Submit)
}
