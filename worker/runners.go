package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// runnerIdle is how long a job runner with nothing to run waits for a job
// before it ends.
const runnerIdle = 10 * time.Second

// runners are the goroutines that run jobs. A job goes to an idle runner
// when there is one, else to a new runner; a runner that finished its job
// waits up to runnerIdle for the next. A goroutine a job used to cost
// grew its stack on every job (the handler, the event's encoding and the
// publish go deeper than a new goroutine's stack): a runner keeps its
// grown stack from job to job.
type runners struct {
	work    chan func() // unbuffered: a send succeeds only to an idle runner
	started atomic.Int64
}

func newRunners() *runners { return &runners{work: make(chan func())} }

// do runs job on an idle runner or a new one; loops owns the new one,
// which ends once ctx ends or it has been idle runnerIdle.
func (r *runners) do(ctx context.Context, loops *sync.WaitGroup, job func()) {
	select {
	case r.work <- job:
		return
	default:
	}
	loops.Add(1)
	r.started.Add(1)
	go func() {
		defer loops.Done()
		job()
		idle := time.NewTimer(runnerIdle)
		defer idle.Stop()
		for {
			select {
			case job := <-r.work:
				job()
				idle.Reset(runnerIdle)
			case <-idle.C:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
}
