package worker

import "github.com/toolq/toolq/contracts"

// WaitingLevels lists the levels of tool (default tenant) whose pull loops
// wait in line for one of its slots: for tests that must know that every
// loop is in line before they free a slot.
func WaitingLevels(w *Worker, tool string) []contracts.Priority {
	w.mu.Lock()
	t := w.tools[tool]
	w.mu.Unlock()
	if t == nil {
		return nil
	}
	t.slots.mu.Lock()
	defer t.slots.mu.Unlock()
	var out []contracts.Priority
	for _, wt := range t.slots.waiters {
		if wt.class.tenant == "" {
			out = append(out, wt.class.level)
		}
	}
	return out
}

// RateLimitOf returns the rate limit w applies to tool's jobs of tenant.
func RateLimitOf(w *Worker, tenant, tool string) *contracts.RateLimit {
	return w.rates.of(tenant, tool)
}

// NotedLastEvent reports whether w remembers the stream sequence of j's
// last event (it notes it after the event is stored, so a requester can
// see the event first).
func NotedLastEvent(w *Worker, j *contracts.Job) bool {
	w.lastEvents.mu.Lock()
	defer w.lastEvents.mu.Unlock()
	_, ok := w.lastEvents.by[lastEventKey(j)]
	return ok
}

// HoldReplays makes w's replays wait, once they have their slots, until
// the returned func is called.
func HoldReplays(w *Worker) (release func()) {
	hold := make(chan struct{})
	w.replays.hold.Store(&hold)
	return func() { close(hold) }
}
