package codemode

import (
	"context"
	"errors"
	"log/slog"

	"github.com/toolq/toolq/contracts"
)

// expireRun expires a run past its TTL: the record is first claimed for the
// expiry by a write at rev (a resume that read it before fails its own
// write), then the exec job fails and the record and snapshot go. A claim
// whose failed event is not written is due at once, so the next sweep
// writes it.
func (c *CodeMode) expireRun(ctx context.Context, rec *record, rev uint64) {
	if !rec.ended() {
		rec.Status, rec.Reason, rec.Lease = runFailed, "expired", nil
		if _, err := c.store.save(ctx, rec, rev); err != nil {
			if !errors.Is(err, errStale) {
				c.log.Warn("expired run not claimed", slog.String("run", rec.RunID), slog.Any("err", err))
			}
			return
		}
	}
	if err := c.failExpired(ctx, rec.Tenant, rec.Session, rec.RunID); err != nil {
		c.log.Warn("expired run: failed event not written; the next sweep retries", slog.String("run", rec.RunID), slog.Any("err", err))
		return
	}
	c.drop(ctx, rec) // the record, and the snapshot object it names
}

// expireRemoved expires a run whose record the server removed at its own
// TTL (a MaxAge marker): its exec job fails, and the snapshot object of the
// run's name, if any, goes (no record is left to name it).
func (c *CodeMode) expireRemoved(ctx context.Context, tenant, session, runID string) error {
	if err := c.failExpired(ctx, tenant, session, runID); err != nil {
		return err
	}
	c.store.dropSnapshot(ctx, runKey(tenant, session, runID))
	return nil
}

// failExpired fails an expired run's exec job (unless it already ended),
// in its tenant's events.
func (c *CodeMode) failExpired(ctx context.Context, tenant, session, runID string) error {
	ref := &contracts.Job{ID: runID, Session: session, Tool: contracts.ToolCodeModeExec, Tenant: tenant}
	werr := contracts.Errorf(contracts.CodeTimeout, "code mode run expired: its snapshot outlived snapshotTtlSeconds while waiting")
	if err := c.w.Emit(ctx, ref, contracts.StatusFailed, 1, nil, werr); err != nil && !isEnded(err) {
		return err
	}
	c.log.Info("code mode run expired", slog.String("run", runID), slog.String("session", session), slog.String("tenant", tenant))
	return nil
}

// onCancel hears the worker's cancel feed: a cancelled exec job's run is
// removed with its snapshot and its pending nested jobs are cancelled, in
// the tenant of the cancel mark's key. Any other job id names no run and
// is passed over after one lookup.
func (c *CodeMode) onCancel(ctx context.Context, tenant, session, jobID string) {
	c.cancelRun(ctx, tenant, session, jobID)
}

// cancelRun ends a cancelled run of tenant: its pending nested jobs are
// cancelled in the same tenant, the exec job's cancelled event is written
// (a default-tenant requester's cancel wrote it already; a tenant's cannot,
// tenants write no events), and the record and snapshot go.
func (c *CodeMode) cancelRun(ctx context.Context, tenant, session, runID string) {
	rec, _, err := c.store.load(ctx, tenant, session, runID)
	if err != nil {
		return
	}
	for _, p := range rec.Pending {
		if p.JobID != "" && !rec.hasResult(p.CallID) {
			c.cancelNested(ctx, tenant, session, p.JobID)
		}
	}
	ref := c.execRef(rec)
	if err := c.w.Emit(ctx, ref, contracts.StatusCancelled, 1, nil, contracts.Errorf(contracts.CodeCancelled, "cancelled by request")); err != nil && !isEnded(err) {
		c.log.Warn("cancelled run: event not written", slog.String("run", runID), slog.Any("err", err))
	}
	c.drop(ctx, rec)
	c.log.Info("code mode run cancelled", slog.String("run", runID), slog.String("tenant", tenant))
}

// cancelNested cancels a nested job of a run of tenant: for the default
// tenant as a requester would; for a named one with the mark and notice on
// the tenant's own keys and subjects (the worker that pulls or runs the job
// writes its cancelled event).
func (c *CodeMode) cancelNested(ctx context.Context, tenant, session, jobID string) {
	if tenant == "" {
		_ = c.prod.Cancel(ctx, session, jobID)
		return
	}
	kv, err := c.js.KeyValue(ctx, c.cfg.Subjects.CancelsBucket())
	if err == nil {
		_, err = kv.Put(ctx, contracts.CancelKey(tenant, session, jobID), []byte(session))
	}
	if err == nil {
		err = c.nc.Publish(c.cfg.Subjects.TenantCancel(tenant, jobID), []byte(session))
	}
	if err != nil {
		c.log.Warn("nested job of a cancelled run not cancelled", slog.String("job", jobID), slog.String("tenant", tenant), slog.Any("err", err))
	}
}
