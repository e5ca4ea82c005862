package codemode

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// RunsObserver is an Observer that is also told, every
// Config.RunsScanInterval, how many code-mode runs are stored (waiting for
// their calls, a wait or a resume), by tenant ("" the default tenant).
// Every worker with code mode reads the whole runs bucket, so each reports
// the same fleet-wide figures.
type RunsObserver interface {
	Observer
	// RunsStored gets the count of stored runs by tenant; a tenant with
	// none is absent.
	RunsStored(count map[string]int)
}

// startRunsScan counts the runs bucket's keys on a timer for a
// RunsObserver.
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
			count, err := c.countStored(ctx)
			cancel()
			if err == nil {
				ro.RunsStored(count)
			} else if lctx.Err() == nil {
				c.log.Debug("stored runs not counted", slog.Any("err", err))
			}
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// countStored counts the runs bucket's subjects by tenant, from one stream
// info with a subjects filter: keys are <session>.<run> for the default
// tenant and <tenant>.<session>.<run> for a named one. A run that ended in
// the last second still counts (its purge marker has that TTL).
func (c *CodeMode) countStored(ctx context.Context) (map[string]int, error) {
	prefix := contracts.KVSubject(c.cfg.Subjects.RunsBucket(), "")
	info, err := c.store.runs.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, err
	}
	count := map[string]int{}
	for subj := range info.State.Subjects {
		key := strings.TrimPrefix(subj, prefix)
		switch strings.Count(key, ".") {
		case 1:
			count[""]++
		case 2:
			tenant, _, _ := strings.Cut(key, ".")
			count[tenant]++
		}
	}
	return count, nil
}
