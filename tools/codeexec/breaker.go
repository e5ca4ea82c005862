package codeexec

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/toolq/toolq/tools/codeexec/provider"
)

// BreakerState is the state of a provider+model breaker.
type BreakerState string

// Breaker states.
const (
	BreakerClosed   BreakerState = "closed"
	BreakerHalfOpen BreakerState = "half-open"
	BreakerOpen     BreakerState = "open"
)

func stateOf(s gobreaker.State) BreakerState {
	switch s {
	case gobreaker.StateOpen:
		return BreakerOpen
	case gobreaker.StateHalfOpen:
		return BreakerHalfOpen
	}
	return BreakerClosed
}

// BreakerChange is a breaker's state change, for the worker to log and
// publish as an event.
type BreakerChange struct {
	Provider string       `json:"provider"`
	Model    string       `json:"model"`
	From     BreakerState `json:"from"`
	To       BreakerState `json:"to"`
	At       time.Time    `json:"at"`
	// RetryAfterMs is, for a change to open, how long until a half-open
	// probe, in milliseconds.
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
}

// maxBreakersPerProvider bounds the breakers one provider keeps; models
// past it share one overflow breaker.
const maxBreakersPerProvider = 64

const overflowModel = "*"

// breaker wraps one gobreaker with the time it last opened.
type breaker struct {
	cb       *gobreaker.CircuitBreaker[*provider.Response]
	openedAt atomic.Int64 // unix nanos of the last change to open
	// lastFault is the provider fault that last counted against the
	// breaker: the cause a refusal reports.
	lastFault atomic.Pointer[provider.Error]

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every state change
}

// changes returns a channel closed at the breaker's next state change.
func (b *breaker) changes() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// breakers holds one provider's breakers, by model.
type breakers struct {
	provider string
	t        *CodeExecution
	mu       sync.Mutex
	byModel  map[string]*breaker
}

func (bs *breakers) get(model string) *breaker {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b, ok := bs.byModel[model]; ok {
		return b
	}
	if len(bs.byModel) >= maxBreakersPerProvider {
		model = overflowModel
		if b, ok := bs.byModel[model]; ok {
			return b
		}
	}
	b := &breaker{changed: make(chan struct{})}
	t := bs.t
	name := bs.provider
	b.cb = gobreaker.NewCircuitBreaker[*provider.Response](gobreaker.Settings{
		Name:        name + "/" + model,
		MaxRequests: 1,
		Timeout:     t.openTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= t.breakerFailures
		},
		IsSuccessful: func(err error) bool { return err == nil },
		// Only provider faults count: a refused request, a rate limit, an
		// answer without text or the caller's cancellation neither trips
		// nor heals the breaker.
		IsExcluded: func(err error) bool { return err != nil && !isFault(err) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			now := t.now()
			ch := BreakerChange{Provider: name, Model: model, From: stateOf(from), To: stateOf(to), At: now}
			if to == gobreaker.StateOpen {
				b.openedAt.Store(now.UnixNano())
				ch.RetryAfterMs = t.openTimeout.Milliseconds()
			}
			t.log.Warn("provider breaker state changed", "provider", name, "model", model,
				"from", string(ch.From), "to", string(ch.To))
			if t.onBreakerChange != nil {
				t.onBreakerChange(ch)
			}
			b.mu.Lock()
			close(b.changed)
			b.changed = make(chan struct{})
			b.mu.Unlock()
		},
	})
	bs.byModel[model] = b
	return b
}

// states returns the state of every breaker, by model.
func (bs *breakers) states() map[string]BreakerState {
	bs.mu.Lock()
	list := make(map[string]*breaker, len(bs.byModel))
	for m, b := range bs.byModel {
		list[m] = b
	}
	bs.mu.Unlock()
	out := make(map[string]BreakerState, len(list))
	for m, b := range list {
		out[m] = stateOf(b.cb.State())
	}
	return out
}

// accepting reports whether b would let a call through now: closed, or
// half-open with its one probe not yet taken.
func (b *breaker) accepting() bool {
	switch b.cb.State() {
	case gobreaker.StateClosed:
		return true
	case gobreaker.StateHalfOpen:
		return b.cb.Counts().Requests == 0
	}
	return false
}

// minBreakerWait is the least a refused job waits before asking a breaker
// again, so a job never spins on one.
const minBreakerWait = 100 * time.Millisecond

// retryAfter is how long a call refused by b should wait: until the
// half-open probe while b is open; while b is half-open (its probe taken),
// an open timeout, though a waiting job wakes as soon as the probe ends.
func (b *breaker) retryAfter(t *CodeExecution) time.Duration {
	opened := b.openedAt.Load()
	d := t.openTimeout
	if b.cb.State() == gobreaker.StateOpen && opened != 0 {
		d = t.openTimeout - t.now().Sub(time.Unix(0, opened))
	}
	return max(d, minBreakerWait)
}

func isFault(err error) bool {
	var pe *provider.Error
	if errors.As(err, &pe) {
		return pe.Fault()
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

func isBreakerRefusal(err error) bool {
	return errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests)
}

// accepting reports whether a job for this provider would be sent now:
// some breaker accepts, or none exists yet.
func (bs *breakers) accepting() bool {
	bs.mu.Lock()
	list := make([]*breaker, 0, len(bs.byModel))
	for _, b := range bs.byModel {
		list = append(list, b)
	}
	bs.mu.Unlock()
	if len(list) == 0 {
		return true
	}
	for _, b := range list {
		if b.accepting() {
			return true
		}
	}
	return false
}
