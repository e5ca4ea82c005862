package shellexec

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/worker"
)

// handleExec runs an exec job: a refusal ends it denied, an allowed command
// runs (or starts a background session), and a command that needs a person
// parks the job as approval_pending with an approval record.
func (s *ShellExec) handleExec(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
	in, err := shell.DecodeInput(job.Input)
	if err != nil {
		return nil, worker.Permanent(err)
	}
	pol, err := s.policyFor(ctx, in)
	if err != nil {
		return nil, worker.Permanent(contracts.Errorf(contracts.CodeInternalError, "%v", err))
	}
	d := shell.Evaluate(pol, in)
	log := s.log.With(slog.String("job", job.ID))
	switch d.Outcome {
	case shell.Deny:
		log.Info("exec denied by policy", slog.String("reason", d.Reason))
		return mustJSON(DeniedResult{Reason: d.Reason, Command: in.Command, Misses: d.Misses}), worker.Deny(d.Reason)
	case shell.Allow, shell.NeedsApproval:
	default:
		return nil, permanent(contracts.CodeInternalError, "unknown policy outcome %q", d.Outcome)
	}
	plan, err := shell.NewPlan(pol, in, &d)
	if err != nil {
		return nil, worker.Permanent(err)
	}
	if d.Outcome == shell.NeedsApproval {
		return s.park(ctx, job, in, plan, &d)
	}
	ref := &contracts.Job{ID: job.ID, Session: job.Session, Tool: job.Tool, Meta: job.Meta, Tenant: job.Tenant}
	if in.Background {
		res, err := s.startBackground(ref, plan) //nolint:contextcheck // a background session outlives the job: it hangs off the tool's lifetime
		if err != nil {
			return nil, worker.Permanent(err)
		}
		return mustJSON(res), nil
	}
	if in.YieldMs != nil && *in.YieldMs > 0 {
		return s.runYielding(ctx, ref, plan, time.Duration(*in.YieldMs)*time.Millisecond)
	}
	res, err := s.runner.Run(ctx, plan)
	return finished(ctx, res, err)
}

// finished turns a foreground run into the job's result or error.
func finished(ctx context.Context, res *shell.Result, err error) (json.RawMessage, error) {
	if err == nil || (res != nil && res.TimedOut) {
		return mustJSON(res), nil
	}
	if ctx.Err() != nil {
		// Cancelled or shut down: the worker reports what ended the job.
		return nil, err
	}
	return nil, worker.Permanent(err)
}

// park records the approval and parks the job as approval_pending.
func (s *ShellExec) park(ctx context.Context, job *contracts.Job, in *shell.Input, plan *shell.Plan, d *shell.Decision) (json.RawMessage, error) {
	a, err := shell.NewApproval(ApprovalID(job.ID), plan, d, time.Now(), s.cfg.ApprovalTTL)
	if err != nil {
		return nil, worker.Permanent(contracts.Errorf(contracts.CodeInternalError, "%v", err))
	}
	// The tenant is the worker's reading of the subject, never the body's.
	a.Tenant, a.Session, a.JobID = job.Tenant, job.Session, job.ID
	rec := &Record{Approval: *a, Tool: job.Tool, Background: in.Background, Status: StatusPending, TraceParent: worker.TraceParent(ctx)}
	_, err = s.store.save(ctx, rec, 0, s.cfg.ApprovalTTL)
	if err == nil && s.cfg.Observer != nil {
		s.cfg.Observer.ApprovalRequested(job.Tenant)
	}
	if err != nil {
		if !errors.Is(err, errStale) {
			return nil, err
		}
		// Made before: by an earlier delivery of this job, or by a job of
		// the same id in another session.
		old, _, lerr := s.store.load(ctx, a.Tenant, a.ID)
		if lerr != nil {
			return nil, permanent(contracts.CodeInternalError, "approval %s exists and cannot be read: %v", a.ID, lerr)
		}
		if old.Approval.Session != job.Session || old.Approval.JobID != job.ID {
			return nil, permanent(contracts.CodeInvalidInput, "approval id %s is taken by a job of another session; resubmit with another job id", a.ID)
		}
		rec = old
	}
	s.log.Info("exec waits for approval", slog.String("job", job.ID), slog.String("approval", rec.Approval.ID),
		slog.String("reason", rec.Approval.Reason))
	return mustJSON(pendingResult(rec)), worker.Park(contracts.StatusApprovalPending, 1)
}

func pendingResult(r *Record) PendingResult {
	a := &r.Approval
	return PendingResult{
		ApprovalID: a.ID, Tenant: a.Tenant, Command: a.Plan.Command, Argv: a.Plan.Argv, Workdir: a.Plan.Workdir, Env: a.Plan.Env,
		Host: a.Plan.Host, TimeoutMs: a.Plan.TimeoutMs,
		Reason: a.Reason, Misses: a.Misses, Unlisted: a.Unlisted, Background: r.Background,
		ExpiresAt: a.ExpiresAt, Hash: a.Hash,
		Script: a.Plan.Script, Shell: a.Plan.Shell, Path: a.Plan.Path, CreatedAt: a.CreatedAt,
	}
}
