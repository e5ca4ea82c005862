package codemode

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/worker"
)

// capWindow is how long a count of a session's (or tenant's) suspended runs
// admits suspensions without asking the bus again. Within it, this worker
// adds its own suspensions to the count; another worker's suspensions are
// seen at the next count, so the cap can be passed by what other workers
// suspend in one window. A refusal is never taken from a cached count: it
// is counted afresh first.
const capWindow = 250 * time.Millisecond

// capCacheMax bounds the counts kept: one per session and tenant that
// suspended a run within the last window.
const capCacheMax = 4096

// runCounts caches counts of live run records by key filter.
type runCounts struct {
	mu sync.Mutex
	by map[string]*runCount
}

type runCount struct {
	at   time.Time
	live int
}

// admit reports whether a run may suspend under the filter's limit with a
// count no older than capWindow, and counts the suspension in.
func (rc *runCounts) admit(filter string, limit int, now time.Time) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := rc.by[filter]
	if n == nil || now.Sub(n.at) >= capWindow || n.live+1 > limit {
		return false
	}
	n.live++
	return true
}

// counted records a fresh count taken at "at", the admitted suspension in.
func (rc *runCounts) counted(filter string, live int, at time.Time) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.by == nil {
		rc.by = map[string]*runCount{}
	}
	if len(rc.by) >= capCacheMax {
		for k, n := range rc.by {
			if at.Sub(n.at) >= capWindow {
				delete(rc.by, k)
			}
		}
		if len(rc.by) >= capCacheMax {
			clear(rc.by) // every count is recent: start over (they are only a shortcut)
		}
	}
	rc.by[filter] = &runCount{at: at, live: live}
}

// checkSuspendedCap refuses a suspension when the session (of the tenant)
// has too many runs.
func (c *CodeMode) checkSuspendedCap(ctx context.Context, tenant, session string) error {
	if err := c.checkRunsUnder(ctx, runKey(tenant, session, "*"), c.cfg.MaxSuspendedPerSession, "per session"); err != nil {
		return err
	}
	if tenant == "" {
		return nil
	}
	// Over all the tenant's sessions: a tenant that opens many sessions is
	// bounded too, by its own cap, not by the runs bucket everyone shares.
	return c.checkRunsUnder(ctx, contracts.TenantKey(tenant, "*.*"), c.cfg.MaxSuspendedPerTenant, "per tenant")
}

// checkRunsUnder refuses a suspension when the live run records whose keys
// match filter are at limit already. A recent count admits without a round
// trip (runCounts); otherwise the bucket's stream counts the keys, and only
// when that count, which includes the short-lived markers of runs that just
// ended, reaches the limit are the live records listed.
func (c *CodeMode) checkRunsUnder(ctx context.Context, filter string, limit int, per string) error {
	if c.counts.admit(filter, limit, time.Now()) {
		return nil
	}
	at := time.Now()
	live, err := c.countRuns(ctx, filter, limit)
	if err != nil {
		return err
	}
	if live >= limit {
		return worker.Permanent(contracts.Errorf(contracts.CodeInvalidInput, "%s (at most %d %s)", msgTooManyRuns, limit, per))
	}
	c.counts.counted(filter, live+1, at)
	return nil
}

// countRuns counts the live run records under filter, exactly when the
// count is near limit.
func (c *CodeMode) countRuns(ctx context.Context, filter string, limit int) (int, error) {
	runs := c.cfg.Subjects.RunsBucket()
	info, err := c.store.runs.Info(ctx, jetstream.WithSubjectFilter(contracts.KVSubject(runs, filter)))
	if err != nil {
		return 0, err
	}
	if n := len(info.State.Subjects); n < limit {
		return n, nil
	}
	lister, err := c.store.kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return 0, err
	}
	defer func() { _ = lister.Stop() }()
	live := 0
	for range lister.Keys() {
		live++
	}
	return live, nil
}
