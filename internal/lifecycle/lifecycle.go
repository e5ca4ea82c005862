// Package lifecycle is the one start/stop state machine of toolq's
// long-running parts (the worker, the tool packs' background loops, the
// scheduler engines). A part supplies what starting and stopping do; the
// Service decides when they run and gives every part the same guarantees:
//
//   - Stop before Start does nothing and returns nil.
//   - Start while running (or starting) returns the part's ErrStarted.
//   - A Start that fails leaves the part stopped, Stopped closed, and Start
//     can be called again. The start function undoes its own partial work;
//     stop never runs for a failed start.
//   - Stop runs the stop function once per run, in a goroutine the Service
//     owns, with the first caller's context. Stop returns when the stop
//     function has returned, or with ctx.Err() when ctx ends first; the stop
//     then goes on. With Config.SoftStop the stop function treats that
//     context as a soft deadline (when it ends, cancel what is left and
//     return promptly), and the first Stop waits for it to return.
//   - A second Stop, concurrent or after the first returned early, never
//     starts a second stop: it waits for the running one (or its own ctx)
//     and returns its error. It never returns nil while the stop still runs.
//   - Stopped is closed whenever the part is not running: before the first
//     Start, after a failed Start, and once a stop has finished. Each Start
//     opens a new one, so take it after Start.
//   - Start during a stop waits for the stop to finish, then starts again;
//     Stop during a start waits for the start, then stops what it started.
package lifecycle

import (
	"context"
	"errors"
	"sync"
)

// ErrStarted is returned by Start while the service runs, unless the
// Config names the part's own error.
var ErrStarted = errors.New("lifecycle: already started")

// Config names what starting and stopping a part do.
type Config struct {
	// Start brings the part up and returns once it runs. On error it must
	// leave nothing running (no goroutine, no subscription).
	Start func(ctx context.Context) error
	// Stop brings a started part down. ctx is the first Stop caller's: its
	// end is the signal to stop waiting politely (cancel in-flight work).
	// The Service waits for Stop to return before the part counts as
	// stopped, whatever ctx does.
	Stop func(ctx context.Context) error
	// ErrStarted is what Start returns while running; ErrStarted by default.
	ErrStarted error
	// SoftStop says Stop's ctx is a soft deadline for the stop function:
	// when it ends, the function cancels what is left and returns promptly.
	// The Stop whose ctx it got then waits for it instead of returning at
	// ctx's end, so its caller knows the part is down when Stop returns.
	// Other, concurrent Stops still return when their own ctx ends.
	SoftStop bool
}

type state int

const (
	idle state = iota
	starting
	running
	stopping
)

// transition is one start or stop in progress; done is closed when it ends.
type transition struct {
	done chan struct{}
	err  error
}

// Service runs one part's start and stop functions. Create it with New.
type Service struct {
	cfg Config

	mu      sync.Mutex
	state   state
	current *transition   // the start or stop in progress, if any
	stopped chan struct{} // closed while not running
}

// New returns a stopped service.
func New(cfg *Config) *Service {
	c := *cfg
	if c.ErrStarted == nil {
		c.ErrStarted = ErrStarted
	}
	stopped := make(chan struct{})
	close(stopped)
	return &Service{cfg: c, stopped: stopped}
}

// Start runs the start function unless the service already runs.
func (s *Service) Start(ctx context.Context) error {
	for {
		s.mu.Lock()
		switch s.state {
		case starting, running:
			s.mu.Unlock()
			return s.cfg.ErrStarted
		case stopping:
			t := s.current
			s.mu.Unlock()
			if !ended(ctx, t) {
				return ctx.Err()
			}
			continue
		case idle:
		}
		t := &transition{done: make(chan struct{})}
		s.state, s.current, s.stopped = starting, t, make(chan struct{})
		s.mu.Unlock()
		return s.start(ctx, t)
	}
}

// errStartPanicked is what a start that panicked counts as, so the service
// is not left starting forever (the panic itself goes on up).
var errStartPanicked = errors.New("lifecycle: start panicked")

func (s *Service) start(ctx context.Context, t *transition) (err error) {
	err = errStartPanicked
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			s.state = idle
			close(s.stopped)
		} else {
			s.state = running
		}
		s.current = nil
		t.err = err
		close(t.done)
	}()
	err = s.cfg.Start(ctx)
	return err
}

// Stop stops the service: it returns once the stop function has returned
// (with its error), or with ctx.Err() when ctx ends first, in which case
// the stop goes on and Stopped closes when it is over.
func (s *Service) Stop(ctx context.Context) error {
	for {
		s.mu.Lock()
		switch s.state {
		case idle:
			s.mu.Unlock()
			return nil
		case starting:
			t := s.current
			s.mu.Unlock()
			if !ended(ctx, t) {
				return ctx.Err()
			}
			continue
		case stopping:
			t := s.current
			s.mu.Unlock()
			return waitFor(ctx, t)
		case running:
		}
		t := &transition{done: make(chan struct{})}
		s.state, s.current = stopping, t
		stopped := s.stopped
		s.mu.Unlock()

		// The stop outlives a caller whose ctx ends; later Stops and
		// Stopped wait for it.
		go func() {
			err := s.cfg.Stop(ctx)
			s.mu.Lock()
			s.state, s.current = idle, nil
			t.err = err
			close(stopped)
			close(t.done)
			s.mu.Unlock()
		}()
		if s.cfg.SoftStop {
			<-t.done
			return t.err
		}
		return waitFor(ctx, t)
	}
}

// Stopped is closed while the service is not running; see the package doc.
func (s *Service) Stopped() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// Running reports whether the service has started and no stop has begun.
func (s *Service) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == running
}

// waitFor waits for t to end and returns its error, or ctx.Err() when ctx
// ends first.
func waitFor(ctx context.Context, t *transition) error {
	if !ended(ctx, t) {
		return ctx.Err()
	}
	return t.err
}

// ended waits for t to end or ctx to; a transition that already ended wins
// over an ended ctx.
func ended(ctx context.Context, t *transition) bool {
	select {
	case <-t.done:
		return true
	case <-ctx.Done():
		select {
		case <-t.done:
			return true
		default:
			return false
		}
	}
}
