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

// errStarted is what an engine's Start returns while it runs.
var errStarted = errors.New("scheduler: already started")

// loops are an engine's background goroutines: they run until cancelAll
// ends their context, and the engine's stop waits for wg. When a run starts
// and stops is the engine's lifecycle's to decide (internal/lifecycle).
type loops struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// begin returns the context of the loops of a new run.
func (l *loops) begin() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	return ctx
}

// goLoop runs f as one of the loops.
func (l *loops) goLoop(f func()) { l.wg.Go(f) }

// cancelAll ends the loops' context.
func (l *loops) cancelAll() {
	if l.cancel != nil {
		l.cancel()
	}
}

// ensureJobsStream creates toolq's streams when the jobs stream is missing
// (as a worker would), or when the NATS engine (needSchedules) finds no
// schedules stream, and checks that the schedules stream allows message
// schedules.
func ensureJobsStream(ctx context.Context, c *Client, needSchedules bool) error {
	name := c.cfg.Subjects.JobsStream()
	if needSchedules {
		name = c.cfg.Subjects.SchedulesStream()
	}
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
