package worker

import (
	"sync"

	"github.com/toolq/toolq/contracts"
)

// lastEventsMax bounds the parked jobs whose last event a worker remembers.
const lastEventsMax = 4096

// lastEvents remembers, for jobs this worker parked or continued with
// Emit, the stream sequence and parent of the job's last event, so that
// the next Emit of the job (a resume's completed event, most often on the
// worker that parked it) writes after it without reading it back first.
// It is only a guess: the write still expects that sequence, so a job
// whose events moved on elsewhere (a cancel, another worker's resume) gets
// a conflict and Emit reads the last event as it always did. The one
// terminal event a job has is kept by the bus, not by this memory.
type lastEvents struct {
	mu sync.Mutex
	by map[string]lastEvent
}

type lastEvent struct {
	seq    uint64
	parent *contracts.Parent
}

// lastEventKey names a job's events: its tenant, session and id, as its
// event subject does.
func lastEventKey(j *contracts.Job) string {
	return contracts.TenantKey(j.Tenant, j.Session+"."+j.ID)
}

// note remembers seq as the job's last event unless a later one is known.
func (l *lastEvents) note(j *contracts.Job, seq uint64) {
	if seq == 0 {
		return
	}
	key := lastEventKey(j)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by = map[string]lastEvent{}
	}
	if old, ok := l.by[key]; ok && old.seq >= seq {
		return
	}
	if len(l.by) >= lastEventsMax {
		clear(l.by) // only a shortcut: start over
	}
	l.by[key] = lastEvent{seq: seq, parent: j.Parent}
}

// take returns and forgets the job's remembered last event.
func (l *lastEvents) take(j *contracts.Job) (lastEvent, bool) {
	key := lastEventKey(j)
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.by[key]
	delete(l.by, key)
	return e, ok
}
