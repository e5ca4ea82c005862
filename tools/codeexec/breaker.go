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
	b := &breaker{}
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

// peek returns the breaker of model if it exists.
func (bs *breakers) peek(model string) *breaker {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return bs.byModel[model]
}

// open reports whether b refuses calls.
func (b *breaker) open() bool { return b.cb.State() == gobreaker.StateOpen }

// retryAfter is how long until b allows a half-open probe.
func (b *breaker) retryAfter(t *CodeExecution) time.Duration {
	opened := b.openedAt.Load()
	if opened == 0 {
		return t.openTimeout
	}
	d := t.openTimeout - t.now().Sub(time.Unix(0, opened))
	if d < time.Millisecond {
		return time.Millisecond
	}
	return d
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
