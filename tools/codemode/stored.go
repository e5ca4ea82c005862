package codemode

import (
	"context"
	"log/slog"
	"time"
)

// RunsObserver is an Observer that is also told, every
// Config.RunsScanInterval, how many code-mode runs are stored (waiting for
// their calls, a wait or a resume), by tenant ("" the default tenant), as
// the fleet's last sweep counted them (every SweepInterval): every worker
// reports the same fleet-wide figures, and none reads the bucket for them.
type RunsObserver interface {
	Observer
	// RunsStored gets the count of stored runs by tenant; a tenant with
	// none is absent.
	RunsStored(count map[string]int)
}

// startRunsScan reads the sweep's counts on a timer for a RunsObserver.
func (c *CodeMode) startRunsScan(lctx context.Context) {
	ro, ok := c.cfg.Observer.(RunsObserver)
	if !ok {
		return
	}
	c.loops.Add(1)
	go func() {
		defer c.loops.Done()
		tick := time.NewTicker(c.cfg.RunsScanInterval)
		defer tick.Stop()
		for {
			ctx, cancel := context.WithTimeout(lctx, c.cfg.RunsScanInterval)
			count, counted, err := c.sweepCounts(ctx)
			cancel()
			switch {
			case counted:
				ro.RunsStored(count)
			case err != nil && lctx.Err() == nil:
				c.log.Debug("stored runs not read", slog.Any("err", err))
			}
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}
