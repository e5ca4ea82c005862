package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/internal/bus"
)

// lifecycle is the Start/Stop/Stopped state every engine shares.
type lifecycle struct {
	mu      sync.Mutex
	started bool
	stopped bool
	done    chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func newLifecycle() lifecycle { return lifecycle{done: make(chan struct{})} }

// begin marks the engine started and returns the context of its loops.
func (l *lifecycle) begin() (context.Context, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return nil, ErrStopped
	}
	if l.started {
		return nil, errors.New("scheduler: already started")
	}
	l.started = true
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	return ctx, nil
}

// go runs f as one of the engine's loops; end waits for it.
func (l *lifecycle) goLoop(f func()) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f()
	}()
}

// end cancels the loops, runs halt and waits for the loops (or ctx). It
// reports whether this call did the stopping.
func (l *lifecycle) end(ctx context.Context, halt func(context.Context)) error {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		<-l.done
		return nil
	}
	l.stopped = true
	started := l.started
	l.mu.Unlock()
	defer close(l.done)
	if !started {
		return nil
	}
	l.cancel()
	if halt != nil {
		halt(ctx)
	}
	waited := make(chan struct{})
	go func() { l.wg.Wait(); close(waited) }()
	select {
	case <-waited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("scheduler: stop: %w", ctx.Err())
	}
}

// ensureJobsStream creates toolq's streams when the jobs stream is missing
// (as a worker would), and checks that it allows message schedules.
func ensureJobsStream(ctx context.Context, c *Client, needSchedules bool) error {
	name := c.cfg.Subjects.JobsStream()
	st, err := c.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if err := bus.Ensure(ctx, c.js, bus.Config{Subjects: c.cfg.Subjects, Replicas: c.cfg.Replicas}); err != nil {
			return err
		}
		st, err = c.js.Stream(ctx, name)
		if err != nil {
			return fmt.Errorf("scheduler: stream %s: %w", name, err)
		}
	} else if err != nil {
		return fmt.Errorf("scheduler: stream %s: %w", name, err)
	}
	if needSchedules && !st.CachedInfo().Config.AllowMsgSchedules {
		return fmt.Errorf("%w: %s", ErrSchedulesDisabled, name)
	}
	return nil
}

// retryDelay is how long a failed firing waits before it is tried again.
const retryDelay = time.Second
