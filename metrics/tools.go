package metrics

import "time"

// CodeMode is code mode's observer (codemode.Config.Observer).
func (m *Metrics) CodeMode() *CodeMode { return &CodeMode{m} }

// CodeMode counts code mode's suspends and resumes and sizes its
// snapshots. It is also the sandbox engine's observer
// (sandbox.EngineConfig.Observer): the VM pool and snapshot restores.
type CodeMode struct{ m *Metrics }

// VMPool sets the pool gauges to the engine's counts (sandbox.Observer).
func (c *CodeMode) VMPool(idle, inUse int) {
	c.m.vmIdle.Set(float64(idle))
	c.m.vmInUse.Set(float64(inUse))
}

// Restored counts a VM restored from a snapshot and how long it took
// (sandbox.Observer).
func (c *CodeMode) Restored(took time.Duration) {
	c.m.restores.Inc()
	c.m.restoreDuration.Observe(took.Seconds())
}

// Suspended counts a suspend and its snapshot's size.
func (c *CodeMode) Suspended(snapshotBytes int) {
	c.m.suspends.Inc()
	c.m.snapshotBytes.Observe(float64(snapshotBytes))
}

// Resumed counts a resume, by how the VM came back.
func (c *CodeMode) Resumed(replayed bool) {
	if replayed {
		c.m.resumes.WithLabelValues("replayed").Inc()
		return
	}
	c.m.resumes.WithLabelValues("restored").Inc()
}

// RunsStored sets the gauge of stored code-mode runs by tenant from the
// code-mode sweep's count of the runs bucket (codemode.RunsObserver); a tenant with
// none left goes to 0, tenants past the cap are summed under OtherTenant.
func (c *CodeMode) RunsStored(count map[string]int) {
	n := map[string]int{}
	for t, v := range count {
		n[c.m.tenant(t)] += v
	}
	c.m.pendingMu.Lock()
	defer c.m.pendingMu.Unlock()
	for l := range c.m.runsSeen {
		if _, ok := n[l]; !ok {
			c.m.runsStored.WithLabelValues(l).Set(0)
		}
	}
	for l, v := range n {
		c.m.runsStored.WithLabelValues(l).Set(float64(v))
		c.m.runsSeen[l] = true
	}
}

// Exec is exec's observer (shellexec.Config.Observer).
func (m *Metrics) Exec() *Exec { return &Exec{m} }

// Exec counts approvals asked for and decided, by tenant.
type Exec struct{ m *Metrics }

// ApprovalRequested counts an approval asked for.
func (e *Exec) ApprovalRequested(tenant string) {
	e.m.approvals.WithLabelValues(e.m.tenant(tenant)).Inc()
}

// ApprovalDecided counts a decision; a verdict other than approved,
// denied or expired counts as "other".
func (e *Exec) ApprovalDecided(tenant, verdict string) {
	switch verdict {
	case "approved", "denied", "expired":
	default:
		verdict = "other"
	}
	e.m.decisions.WithLabelValues(e.m.tenant(tenant), verdict).Inc()
}

// ApprovalsPending sets the gauges of waiting approvals from exec's scan
// of the approvals bucket (shellexec.PendingObserver): the count and the
// oldest's wait by tenant; tenants with none waiting go to 0 (capped
// tenants summed under OtherTenant, the oldest of them kept).
func (e *Exec) ApprovalsPending(count map[string]int, oldest map[string]time.Duration) {
	n, age := map[string]int{}, map[string]time.Duration{}
	for t, c := range count {
		l := e.m.tenant(t)
		n[l] += c
		age[l] = max(age[l], oldest[t])
	}
	e.m.pendingMu.Lock()
	defer e.m.pendingMu.Unlock()
	for l := range e.m.pendingSeen {
		if _, ok := n[l]; !ok {
			e.m.pending.WithLabelValues(l).Set(0)
			e.m.pendingAge.WithLabelValues(l).Set(0)
		}
	}
	for l, c := range n {
		e.m.pending.WithLabelValues(l).Set(float64(c))
		e.m.pendingAge.WithLabelValues(l).Set(age[l].Seconds())
		e.m.pendingSeen[l] = true
	}
}

// BreakerChanged sets a provider's breaker gauge for a model to its new
// state ("closed", "half-open", "open"; codeexec.BreakerChange). The
// models of a provider are bounded by codeexec itself (past 64 they share
// the breaker "*").
func (m *Metrics) BreakerChanged(provider, model, to string) {
	v := 0.0
	switch to {
	case "half-open":
		v = 1
	case "open":
		v = 2
	}
	m.breaker.WithLabelValues(provider, model).Set(v)
}

// Scheduler is the scheduler's observer (scheduler.NATSConfig.Observer,
// scheduler.AsynqConfig.Observer).
func (m *Metrics) Scheduler() *Scheduler { return &Scheduler{m} }

// Scheduler counts firings, their lateness, catch-ups and failures.
type Scheduler struct{ m *Metrics }

// Fired counts a firing enqueued late after its fire time.
func (s *Scheduler) Fired(late time.Duration) {
	s.m.firings.Inc()
	s.m.lateness.Observe(late.Seconds())
}

// CaughtUp counts a missed firing made up.
func (s *Scheduler) CaughtUp() { s.m.catchUps.Inc() }

// FireFailed counts a firing not enqueued this time.
func (s *Scheduler) FireFailed() { s.m.firingErr.Inc() }
