package worker

import (
	"sync"
	"time"

	"github.com/toolq/toolq/contracts"
)

// agingLimit is how many jobs of higher levels of its tenant a waiting pull
// loop lets start before it is served itself: every level below the top
// gets at least one slot in agingLimit+1 while it contends, so low jobs
// never starve.
const agingLimit = 4

// slots is one tool's concurrency on this worker, shared by the pull loops
// of every tenant and level of the tool. A loop waits for a slot before it
// takes a job; when slots are short, the next free one goes to
//
//  1. the tenant that has had the least of them for its weight (start-time
//     fair queuing: a tenant's tag grows by 1/weight a grant, and a tenant
//     that was idle starts at the current tag, with no credit saved up);
//  2. within it, the highest level, unless a lower level has waited
//     through agingLimit grants;
//  3. then a job already delivered (held) before a loop that will fetch,
//     then the longest waiting.
//
// There is no central dispatcher: each worker orders its own slots, and
// every worker pulls every tenant's and level's consumer.
type slots struct {
	mu      sync.Mutex
	free    int
	size    int
	waiters []*slotWaiter
	seq     uint64
	tags    map[string]float64 // each tenant's finish tag
	now     float64            // the start tag of the last grant
}

// slotClass is who asks for a slot.
type slotClass struct {
	tenant string
	weight int
	level  contracts.Priority
	held   bool // the loop already holds a delivered job
}

type slotWaiter struct {
	class  slotClass
	seq    uint64
	passed int
	ready  chan struct{}
}

func newSlots(n int) *slots {
	return &slots{free: n, size: n, tags: map[string]float64{}}
}

// acquire waits for a slot for c. It returns false, holding none, when
// stop is closed first. While it waits, beat (if not nil) runs every
// period: a held job's heartbeat.
func (s *slots) acquire(stop <-chan struct{}, c slotClass, period time.Duration, beat func()) bool {
	return s.wait(s.enqueue(c), stop, period, beat)
}

// enqueue puts c in line for a slot (granting one at once when one is
// free and nobody waits) without waiting: a busy loop queues for its next
// slot while its jobs run, so the slot one of them frees can be its own.
func (s *slots) enqueue(c slotClass) *slotWaiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	wt := &slotWaiter{class: c, seq: s.seq, ready: make(chan struct{})}
	if s.free > 0 && len(s.waiters) == 0 {
		s.free--
		s.charge(c)
		close(wt.ready)
		return wt
	}
	s.waiters = append(s.waiters, wt)
	return wt
}

// wait waits for wt's slot; false, holding none, when stop is closed first.
func (s *slots) wait(wt *slotWaiter, stop <-chan struct{}, period time.Duration, beat func()) bool {
	select {
	case <-wt.ready:
		return true
	default:
	}
	var tick <-chan time.Time
	if beat != nil {
		t := time.NewTicker(period)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-wt.ready:
			return true
		case <-tick:
			beat()
		case <-stop:
			s.cancel(wt)
			return false
		}
	}
}

// cancel takes wt out of line, or gives its slot on when it was granted.
func (s *slots) cancel(wt *slotWaiter) {
	s.mu.Lock()
	for i, o := range s.waiters {
		if o == wt {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			s.mu.Unlock()
			return
		}
	}
	s.mu.Unlock()
	s.release(1)
}

// tryAcquire takes up to n more free slots for c, none while a loop other
// than the one that queued own waits: extra slots go to a loop only when
// nobody contends for them.
func (s *slots) tryAcquire(c slotClass, n int, own *slotWaiter) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.waiters {
		if o != own {
			return 0
		}
	}
	got := min(n, s.free)
	s.free -= got
	for range got {
		s.charge(c)
	}
	return got
}

// release gives n slots back, each to the next waiter in order.
func (s *slots) release(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		i := s.next()
		if i < 0 {
			s.free++
			continue
		}
		wt := s.waiters[i]
		s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
		s.charge(wt.class)
		close(wt.ready)
	}
}

// started counts a job of c's level starting against the lower levels of
// its tenant that wait: their aging counts jobs run ahead of them, not
// grants (a loop that finds its level empty gives its slot back).
func (s *slots) started(c slotClass) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.waiters {
		if o.class.tenant == c.tenant && o.class.level.Rank() > c.level.Rank() {
			o.passed++
		}
	}
}

// charge counts one grant against c's tenant.
func (s *slots) charge(c slotClass) {
	start := max(s.tags[c.tenant], s.now)
	s.now = start
	s.tags[c.tenant] = start + 1/float64(max(c.weight, 1))
}

// forget drops a tenant's tag (it is no longer served).
func (s *slots) forget(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tags, tenant)
}

// next returns the index of the waiter the next slot goes to, -1 for none.
func (s *slots) next() int {
	if len(s.waiters) == 0 {
		return -1
	}
	// The tenant with the smallest start tag; ties to the longest waiting.
	tenant, best, first := "", 0.0, uint64(0)
	for _, wt := range s.waiters {
		tag := max(s.tags[wt.class.tenant], s.now)
		if first == 0 || tag < best || (tag == best && wt.seq < first) {
			tenant, best, first = wt.class.tenant, tag, wt.seq
		}
	}
	pick := -1
	for i, wt := range s.waiters {
		if wt.class.tenant != tenant {
			continue
		}
		if pick < 0 || s.before(wt, s.waiters[pick]) {
			pick = i
		}
	}
	return pick
}

// before orders two waiters of one tenant.
func (s *slots) before(a, b *slotWaiter) bool {
	if aa, ba := a.passed >= agingLimit, b.passed >= agingLimit; aa != ba {
		return aa
	} else if aa {
		return a.seq < b.seq
	}
	if ar, br := a.class.level.Rank(), b.class.level.Rank(); ar != br {
		return ar < br
	}
	if a.class.held != b.class.held {
		return a.class.held
	}
	return a.seq < b.seq
}
