package codemode

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"
)

// sweep is the safety net of autoResume runs: every SweepInterval (with
// jitter, so workers do not sweep in step) it looks for autoResume runs
// that could resume but that nobody is resuming — a resume lease that ran
// out (its worker died mid-resume, its trigger already acked) or every
// result back with no resume under way — and resumes them. A record
// written less than half a lease ago is left to the trigger that wrote it.
func (c *CodeMode) sweep(ctx context.Context) {
	defer c.loops.Done()
	for {
		d := c.cfg.SweepInterval
		d += time.Duration(rand.Int64N(int64(d)/5 + 1)) //nolint:gosec // G404: jitter, not a secret
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		c.sweepOnce(ctx)
	}
}

func (c *CodeMode) sweepOnce(ctx context.Context) {
	lister, err := c.store.kv.ListKeys(ctx)
	if err != nil {
		return
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	_ = lister.Stop()
	for _, key := range keys {
		if ctx.Err() != nil {
			return
		}
		tenant, session, runID, ok := parseRunKey(key)
		if !ok {
			continue
		}
		e, err := c.store.kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var rec record
		if json.Unmarshal(e.Value(), &rec) != nil || !rec.belongsTo(tenant, session, runID) {
			continue
		}
		rec.Tenant = tenant // the key's, as load does
		now := time.Now()
		if !rec.AutoResume || rec.ended() || !rec.resumable(now) || now.Sub(e.Created()) < c.cfg.LeaseTTL/2 {
			continue
		}
		c.log.Info("sweeping a stalled autoResume run", slog.String("run", rec.RunID), slog.String("status", rec.Status))
		rctx, cancel := context.WithTimeout(ctx, c.cfg.MaxSnapshotTTL)
		_, err = c.resume(rctx, &rec, e.Revision(), "")
		cancel()
		if err != nil && !errors.Is(err, errStale) && !errors.Is(err, errBusy) && !errors.Is(err, errLeaseLost) {
			c.log.Warn("sweep: resume failed", slog.String("run", rec.RunID), slog.Any("err", err))
		}
	}
}
