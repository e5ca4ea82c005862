package shellexec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/worker"
)

// handleDecide applies a person's signed decision to an approval, once.
//
// Every decision is verified, also one that repeats the recorded decision:
// a decision that does not verify (unsigned, unknown approver, bad
// signature, another approval or command, expired) fails the job with code
// denied and leaves the approval alone. The first valid decision wins by a
// write conditional on the record's revision; any later one — another
// decision, or the same one republished after the duplicate window — is a
// no-op answered with the recorded outcome (applied=false) and never
// touches the exec job. Only a redelivery (Attempt > 1) of the decide job
// that made the decision resumes it: an approval runs its command inside
// the decide job, so a worker that died meanwhile is noticed and the exec
// job failed instead of running the command again.
func (s *ShellExec) handleDecide(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
	var in DecideInput
	dec := json.NewDecoder(bytes.NewReader(job.Input))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, permanent(contracts.CodeInvalidInput, "malformed decision: %v", err)
	}
	d := &in.Decision
	if err := contracts.ValidateID("approval id", d.ApprovalID); err != nil {
		return nil, worker.Permanent(err)
	}
	// The decision job's tenant (from its subject) is the only tenant whose
	// approvals it may decide, and it must be the one the decision names.
	tenant := job.Tenant
	log := s.log.With(slog.String("approval", d.ApprovalID), slog.String("tenant", tenant), slog.String("decideJob", job.ID), slog.String("approver", d.Approver))
	if d.Tenant != tenant {
		log.Warn("decision names another tenant", slog.String("decisionTenant", d.Tenant))
		return nil, permanent(contracts.CodeDenied, "decision refused: it names another tenant than the one it was sent for")
	}
	if tenant != "" && d.Always {
		// An always entry joins the allowlist every tenant's jobs run under.
		return nil, permanent(contracts.CodeDenied, "decision refused: a tenant's approval cannot add to the shared allowlist (always)")
	}
	if tenant == "" && len(s.cfg.Approvers) == 0 {
		// This worker takes decisions only for tenants' approvers: hand it
		// back for a worker that has the default tenant's approvers.
		return nil, errors.New("shellexec: this worker has no approvers of the default tenant")
	}
	trusted, err := s.approversFor(ctx, tenant)
	if err != nil {
		return nil, err
	}
	for range 10 {
		rec, rev, err := s.store.load(ctx, tenant, d.ApprovalID)
		if errors.Is(err, errNoApproval) {
			log.Info("decision for an unknown or expired approval")
			return nil, permanent(contracts.CodeInvalidInput, "approval %s is unknown or expired", d.ApprovalID)
		}
		if err != nil {
			return nil, err
		}
		act := decideActionFor(rec, d, job.ID, worker.Attempt(ctx), time.Now())
		if verr := shell.VerifyDecision(d, &rec.Approval, trusted, act.verifyAt); verr != nil {
			log.Warn("approval decision refused", slog.Any("err", verr))
			return nil, permanent(contracts.CodeDenied, "decision refused: %v", verr)
		}
		res := DecideResult{ApprovalID: rec.Approval.ID, JobID: rec.Approval.JobID, Session: rec.Approval.Session, Status: rec.Status}
		switch act.kind {
		case decideIgnore:
			log.Info("approval already decided; decision ignored", slog.String("status", rec.Status), slog.Int("attempt", worker.Attempt(ctx)))
			return mustJSON(res), nil
		case decideNew:
			rec.Status = StatusApproved
			if d.Verdict == shell.Reject {
				rec.Status = StatusDenied
			}
			dc := *d
			rec.Decision, rec.DecideJob, rec.DecidedAt = &dc, job.ID, time.Now().UTC()
			if _, err := s.store.save(ctx, rec, rev, s.cfg.DecidedTTL); err != nil {
				if errors.Is(err, errStale) {
					continue // decided or cancelled meanwhile: look again
				}
				return nil, err
			}
			log.Info("approval decided", slog.String("status", rec.Status), slog.Bool("always", d.Always))
			if s.cfg.Observer != nil {
				s.cfg.Observer.ApprovalDecided(tenant, rec.Status)
			}
		case decideResume:
			log.Info("redelivered decision resumed", slog.String("status", rec.Status))
		}
		res.Status, res.Applied = rec.Status, true
		var sp worker.Span
		if s.w.Tracing() {
			if act.kind == decideNew {
				s.traceWait(ctx, rec, rec.Status)
			}
			// Carrying the decision out (an approved command runs here) is
			// a span of the exec job's trace, linked to the decide job's.
			sp = s.w.StartSpan(worker.SpanStart{Name: "exec.apply", Parent: rec.TraceParent, Links: traceLinks(ctx), Attrs: approvalAttrs(rec)})
		}
		decided := func() {
			if !job.Progress {
				return
			}
			// Tell the approver at once; an approved command may run long.
			if err := s.emit(ctx, job, contracts.StatusProgress, 1, res, nil); err != nil {
				log.Debug("decision progress not written", slog.Any("err", err))
			}
		}
		err = s.apply(ctx, rec, decided)
		if sp != nil {
			var code contracts.ErrorCode
			if err != nil {
				code = contracts.AsError(err).Code
			}
			sp.End(rec.Status, code)
		}
		if err != nil {
			return nil, err
		}
		return mustJSON(res), nil
	}
	return nil, fmt.Errorf("shellexec: approval %s kept changing", d.ApprovalID)
}

type decideKind int

const (
	decideNew    decideKind = iota // record it, then apply it
	decideResume                   // a redelivery of the deciding job: apply the record
	decideIgnore                   // decided before: answer with the recorded outcome
)

type decideAction struct {
	kind decideKind
	// verifyAt is the time the decision is verified at: now, or for the
	// recorded decision itself the time it was accepted (the approval may
	// have expired since, while its command ran).
	verifyAt time.Time
}

// decideActionFor says what decision d, delivered for the attempt-th time
// in decide job jobID, does to rec.
func decideActionFor(rec *Record, d *shell.ApprovalDecision, jobID string, attempt int, now time.Time) decideAction {
	if rec.Status == StatusPending {
		return decideAction{kind: decideNew, verifyAt: now}
	}
	same := rec.Decision != nil && rec.Decision.Signature == d.Signature &&
		bytes.Equal(rec.Decision.SigningPayload(), d.SigningPayload())
	if !same {
		return decideAction{kind: decideIgnore, verifyAt: now}
	}
	act := decideAction{kind: decideIgnore, verifyAt: rec.DecidedAt}
	if act.verifyAt.IsZero() {
		act.verifyAt = now
	}
	if rec.DecideJob == jobID && attempt > 1 && rec.Status != StatusCancelled {
		act.kind = decideResume
	}
	return act
}

// apply carries a recorded decision out on the exec job, calling decided
// once the job's approved or denied event is written (or the job is found
// ended), before an approved command runs.
func (s *ShellExec) apply(ctx context.Context, rec *Record, decided func()) error {
	a := &rec.Approval
	d := rec.Decision
	ref := &contracts.Job{ID: a.JobID, Session: a.Session, Tool: rec.Tool, Tenant: a.Tenant}
	if rec.Status == StatusDenied {
		reason := ReasonApprover
		if d.Reason != "" {
			reason += ": " + d.Reason
		}
		err := s.emit(ctx, ref, contracts.StatusDenied, 1,
			DeniedResult{Reason: reason, Command: a.Plan.Command, Misses: a.Misses, ApprovalID: a.ID, Approver: d.Approver},
			contracts.Errorf(contracts.CodeDenied, "%s", reason))
		if err != nil && !isEnded(err) {
			return err
		}
		decided()
		return nil
	}
	if d.Always {
		if err := s.allow(ctx, shell.AlwaysEntries(s.cfg.Policy, &a.Plan).Entries); err != nil {
			return err
		}
	}
	last, err := s.lastEvent(ctx, s.cfg.Subjects.TenantEvent(a.Tenant, a.Session, a.JobID))
	if err != nil {
		return err
	}
	switch {
	case last == nil:
		return permanent(contracts.CodeInternalError, "exec job %s has no events", a.JobID)
	case last.Data.Status.Terminal():
		s.log.Info("approved job already ended; not run", slog.String("job", a.JobID), slog.String("status", string(last.Data.Status)))
		decided()
		return nil
	case last.Data.Status != contracts.StatusApprovalPending:
		// Approved before, by this decide job on a worker that stopped.
		werr := contracts.Errorf(contracts.CodeInternalError, "the worker running the approved command stopped; it is not run again")
		if err := s.emit(ctx, ref, contracts.StatusFailed, 1, nil, werr); err != nil && !isEnded(err) {
			return err
		}
		return nil
	}
	if _, err := s.cancels.Get(ctx, contracts.CancelKey(a.Tenant, a.Session, a.JobID)); err == nil {
		// Cancelled while it waited, by a cancel the feed did not bring
		// (a tenant's): it ends cancelled and never runs.
		werr := contracts.Errorf(contracts.CodeCancelled, "job was cancelled while it waited for approval")
		if err := s.emit(ctx, ref, contracts.StatusCancelled, 1, nil, werr); err != nil && !isEnded(err) {
			return err
		}
		decided()
		return nil
	}
	err = s.emit(ctx, ref, contracts.StatusApproved, 1, ApprovedResult{ApprovalID: a.ID, Approver: d.Approver, Always: d.Always}, nil)
	if isEnded(err) {
		decided()
		return nil // cancelled meanwhile
	}
	if err != nil {
		return err
	}
	decided()
	s.runApproved(ctx, rec, ref)
	return nil
}

// lastEvent returns the last event on subject (which may hold a wildcard);
// nil when there is none.
func (s *ShellExec) lastEvent(ctx context.Context, subject string) (*contracts.Event, error) {
	ev, _, err := s.lastEventTrace(ctx, subject)
	return ev, err
}

// lastEventTrace is lastEvent with the traceparent the event was written
// under.
func (s *ShellExec) lastEventTrace(ctx context.Context, subject string) (*contracts.Event, string, error) {
	raw, err := s.events.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, "", nil
		}
		return nil, "", fmt.Errorf("shellexec: last event on %s: %w", subject, err)
	}
	ev, err := contracts.DecodeEvent(raw.Data)
	if err != nil {
		return nil, "", fmt.Errorf("shellexec: stored event on %s: %w", subject, err)
	}
	return ev, raw.Header.Get(bus.HeaderTraceParent), nil
}

// traceWait records the approval's wait, from approval_pending to its
// decision (approved, denied, cancelled, expired), as a span of the exec
// job's trace.
func (s *ShellExec) traceWait(ctx context.Context, rec *Record, decision string) {
	s.w.StartSpan(worker.SpanStart{
		Name: "exec.approval_wait", Parent: rec.TraceParent, Start: rec.Approval.CreatedAt,
		Links: traceLinks(ctx), Attrs: approvalAttrs(rec),
	}).End(decision, "")
}

// traceLinks links a span to the running job's, when there is one.
func traceLinks(ctx context.Context) []string {
	if tp := worker.TraceParent(ctx); tp != "" {
		return []string{tp}
	}
	return nil
}

func approvalAttrs(rec *Record) []slog.Attr {
	a := &rec.Approval
	attrs := []slog.Attr{
		slog.String("toolq.exec.approval_id", a.ID), slog.String(worker.AttrJobID, a.JobID), slog.String(worker.AttrSession, a.Session),
	}
	if a.Tenant != "" {
		attrs = append(attrs, slog.String(worker.AttrTenant, a.Tenant))
	}
	return attrs
}

// approversFor returns the keys trusted to decide tenant's approvals: the
// worker's own for the default tenant; for a named tenant those of its
// record in the tenants bucket (none when it is not registered), and the
// worker's own too only with Config.ApproversForTenants. The record is read
// for every decision, so a removed approver is refused at once.
func (s *ShellExec) approversFor(ctx context.Context, tenant string) ([]string, error) {
	if tenant == "" {
		return s.cfg.Approvers, nil
	}
	var keys []string
	if s.cfg.ApproversForTenants {
		keys = append(keys, s.cfg.Approvers...)
	}
	kv, err := s.tenantsKV(ctx)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return keys, nil
	}
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, tenant)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return keys, nil
	}
	if err != nil {
		return nil, fmt.Errorf("shellexec: tenant %s: %w", tenant, err)
	}
	rec, err := bus.DecodeTenant(tenant, e.Value())
	if err != nil {
		s.log.Warn("tenant record refused: the tenant has no approvers", slog.String("tenant", tenant), slog.Any("err", err))
		return keys, nil
	}
	return append(keys, rec.Approvers...), nil
}

// tenantsKV returns the tenants bucket, looked up once it exists.
func (s *ShellExec) tenantsKV(ctx context.Context) (jetstream.KeyValue, error) {
	s.tenantsMu.Lock()
	defer s.tenantsMu.Unlock()
	if s.tenants != nil {
		return s.tenants, nil
	}
	kv, err := s.js.KeyValue(ctx, s.cfg.Subjects.TenantsBucket())
	if err != nil {
		return nil, err
	}
	s.tenants = kv
	return kv, nil
}
