package codemode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/worker"
)

// handleWait runs a code_mode.wait job: it claims the run for this wait,
// waits (watching the run's record) until every pending call is back, then
// resumes the run and answers with the CodeModeResult that follows.
func (c *CodeMode) handleWait(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
	var in WaitInput
	dec := json.NewDecoder(bytes.NewReader(job.Input))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, worker.Permanent(contracts.Errorf(contracts.CodeInvalidInput, "code_mode.wait input {runId}: %v", err))
	}
	if !contracts.ValidID(in.RunID) {
		return nil, invalid(msgUnavailable)
	}
	key := runKey(job.Tenant, job.Session, in.RunID)
	watch, err := c.store.kv.Watch(ctx, key, jetstream.UpdatesOnly())
	if err != nil {
		return nil, err
	}
	defer func() { _ = watch.Stop() }()
	for {
		rec, rev, err := c.store.load(ctx, job.Tenant, job.Session, in.RunID)
		if errors.Is(err, errNoRun) {
			return nil, c.unknownRun(ctx, job.Tenant, job.Session, in.RunID)
		}
		if err != nil {
			return nil, err
		}
		now := time.Now()
		if rec.Wait.heldBy(job.ID, now) {
			return nil, invalid(msgWaitInFlight)
		}
		if rec.Wait == nil || rec.Wait.Owner != job.ID || rec.Wait.Until.Sub(now) < c.cfg.LeaseTTL/2 {
			rec.Wait = &lease{Owner: job.ID, Until: now.Add(c.cfg.LeaseTTL)}
			if _, err := c.store.save(ctx, rec, rev); err != nil {
				if errors.Is(err, errStale) {
					continue
				}
				return nil, err
			}
			continue
		}
		if rec.resumable(time.Now()) && !rec.Lease.heldBy("", now) {
			res, err := c.resume(ctx, rec, rev, job.ID)
			switch {
			case errors.Is(err, errStale), errors.Is(err, errBusy), errors.Is(err, errLeaseLost):
				continue
			case err != nil:
				return nil, err
			}
			return waitAnswer(res)
		}
		// Not yet: sleep until the record changes, the claim needs
		// refreshing, or a lease held elsewhere may have expired.
		wake := time.NewTimer(c.cfg.LeaseTTL / 3)
		select {
		case <-ctx.Done():
			wake.Stop()
			return nil, ctx.Err()
		case <-watch.Updates():
		case <-wake.C:
		}
		wake.Stop()
	}
}

// waitAnswer: the wait job completes with the run's next CodeModeResult
// (which may be waiting again); a failed run fails the wait job too.
func waitAnswer(res *sandbox.Result) (json.RawMessage, error) {
	if res.Status == sandbox.StatusFailed {
		return nil, failedResult(res)
	}
	return json.Marshal(res)
}

// unknownRun tells apart a run of another session of the same tenant from
// one that does not exist (or expired). Only the tenant's own keys are
// looked at: another tenant's run of that id is, to this tenant, a run
// that does not exist, and its existence is not revealed.
func (c *CodeMode) unknownRun(ctx context.Context, tenant, session, runID string) error {
	keys, err := c.store.kv.ListKeysFiltered(ctx, runKey(tenant, "*", runID))
	if err == nil {
		defer func() { _ = keys.Stop() }()
		for k := range keys.Keys() {
			if t, s, r, ok := parseRunKey(k); ok && t == tenant && r == runID && s != session {
				return invalid(msgOtherSession)
			}
		}
	}
	return invalid(msgUnavailable)
}
