package shellexec

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

// startExpiry follows the approvals bucket for the markers JetStream writes
// when an undecided approval outlives its TTL: the exec job is denied with
// reason timeout. One durable consumer is shared by every worker. A decided
// record is rewritten with a new TTL, so only an undecided one expires
// while its job is still approval_pending.
func (s *ShellExec) startExpiry(ctx context.Context) error {
	return bus.FollowExpiries(ctx, s.lctx, s.js, bus.ExpiryConfig{
		Bucket: s.cfg.Subjects.ApprovalsBucket(), Durable: "shellexec_expiry", Logger: s.log,
		Expired: func(ctx context.Context, key string) error {
			// The key is the approval id, or <tenant>.<id> for a named
			// tenant's (contracts.ExecApprovalKey).
			tenant, id, named := strings.Cut(key, ".")
			if !named {
				tenant, id = "", key
			}
			if !contracts.ValidID(id) || (named && !contracts.ValidID(tenant)) {
				return nil
			}
			return s.expire(ctx, tenant, id)
		},
	}, &s.loops)
}

// expire denies the exec job of tenant's expired approval with reason
// timeout, unless the job moved on (decided, cancelled).
func (s *ShellExec) expire(ctx context.Context, tenant, id string) error {
	ctx, cancel := context.WithTimeout(ctx, emitTimeout)
	defer cancel()
	// The approval id is the job id; the session is found from the job's
	// events, among the tenant's own.
	ev, tp, err := s.lastEventTrace(ctx, s.cfg.Subjects.TenantEvent(tenant, "*", id))
	if err != nil {
		return err
	}
	if ev == nil || ev.Data.Status != contracts.StatusApprovalPending {
		return nil
	}
	var pending PendingResult
	_ = json.Unmarshal(ev.Data.Result, &pending)
	ref := &contracts.Job{ID: ev.Data.JobID, Session: ev.Data.Session, Tool: ev.Data.Tool, Meta: ev.Data.Meta, Tenant: tenant}
	err = s.emit(ctx, ref, contracts.StatusDenied, 1,
		DeniedResult{Reason: ReasonTimeout, Command: pending.Command, Misses: pending.Misses, ApprovalID: id},
		contracts.Errorf(contracts.CodeDenied, "%s: nobody decided within %s", ReasonTimeout, s.cfg.ApprovalTTL))
	if err != nil && !isEnded(err) {
		return err
	}
	if err == nil && s.cfg.Observer != nil {
		s.cfg.Observer.ApprovalDecided(tenant, "expired")
	}
	if err == nil && s.w.Tracing() {
		// The record has expired: the wait is told from the event, a child
		// of the span the exec job was submitted under.
		rec := &Record{Approval: contracts.ExecApproval{ID: id, Tenant: tenant, Session: ref.Session, JobID: ref.ID, CreatedAt: pending.CreatedAt}, TraceParent: tp}
		s.traceWait(ctx, rec, "expired")
	}
	s.log.Info("approval expired: exec denied", slog.String("approval", id), slog.String("tenant", tenant), slog.String("job", ref.ID))
	return nil
}

// onCancel hears the worker's cancel feed: a cancelled job's approved
// command or background session is killed, and its pending approval is
// marked cancelled so no later decision runs it, each under the job's own
// tenant and session.
func (s *ShellExec) onCancel(ctx context.Context, tenant, session, jobID string) {
	s.stopRun(tenant, session, jobID, errJobCancelled)
	s.cancelApproval(ctx, tenant, session, jobID)
}

// cancelApproval marks the pending approval of tenant's cancelled exec job.
func (s *ShellExec) cancelApproval(ctx context.Context, tenant, session, jobID string) {
	ctx, cancel := context.WithTimeout(ctx, emitTimeout)
	defer cancel()
	for range 5 {
		rec, rev, err := s.store.load(ctx, tenant, ApprovalID(jobID))
		if err != nil || rec.Status != StatusPending || rec.Approval.Session != session || rec.Approval.JobID != jobID {
			return
		}
		rec.Status, rec.DecidedAt = StatusCancelled, time.Now().UTC()
		_, err = s.store.save(ctx, rec, rev, s.cfg.DecidedTTL)
		if !errors.Is(err, errStale) {
			if err == nil && s.w.Tracing() {
				s.traceWait(ctx, rec, StatusCancelled)
			}
			if err == nil {
				s.log.Info("pending approval cancelled with its job", slog.String("approval", rec.Approval.ID), slog.String("tenant", tenant))
				// A default-tenant requester's cancel wrote the job's
				// cancelled event; a tenant's cannot (tenants write no
				// events), so the worker does, once.
				ref := &contracts.Job{ID: jobID, Session: session, Tool: rec.Tool, Tenant: tenant}
				if err := s.emit(ctx, ref, contracts.StatusCancelled, 1, nil, contracts.Errorf(contracts.CodeCancelled, "cancelled by request")); err != nil && !isEnded(err) {
					s.log.Warn("cancelled approval: event not written", slog.String("job", jobID), slog.Any("err", err))
				}
			}
			return
		}
	}
}
