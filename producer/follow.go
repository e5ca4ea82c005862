package producer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

type waiter struct {
	ch   chan *contracts.Event
	opts *AwaitOpts
}

// follower demultiplexes one session's events to the waiters of its jobs.
type follower struct {
	feed *feed
	end  context.CancelFunc // ends the feed's run
	done chan struct{}      // closed when the feed's run has returned
	sub  *nats.Subscription // instead of the feed on a tenant account

	mu       sync.Mutex
	waiters  map[string][]*waiter
	lastUsed time.Time
}

// followerIdle is how long a session's follower lives without waiters.
const followerIdle = 2 * time.Minute

// follow returns the session's follower, starting it if needed, with w
// registered for jobID. Once it returns, every event of the job stored
// later reaches w.
//
// The waiter is added under p.mu, the lock every sweep holds: a follower
// found idle is in use before any other follow can sweep it. (Adding it
// after the lookup let a concurrent follow of another session stop the
// follower in between, and the waiter then hung on a stopped consumer.)
func (p *Producer) follow(ctx context.Context, session, jobID string, w *waiter) (*follower, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if f, ok := p.followers[session]; ok {
		f.add(jobID, w)
		return f, nil
	}
	p.sweepLocked(ctx, time.Now())
	if p.cfg.TenantAccount {
		// The tenant's events are imported as plain messages: subscribe.
		f := &follower{waiters: map[string][]*waiter{}, lastUsed: time.Now()}
		sub, err := p.nc.Subscribe(p.cfg.Subjects.SessionEvents(session), func(m *nats.Msg) { f.dispatch(m.Data) })
		if err == nil {
			err = p.nc.FlushWithContext(ctx)
		}
		if err != nil {
			if sub != nil {
				_ = sub.Unsubscribe()
			}
			return nil, fmt.Errorf("producer: follow session %s: %w", session, err)
		}
		f.sub = sub
		f.add(jobID, w)
		p.followers[session] = f
		return f, nil
	}
	fd, err := p.openFeed(ctx, p.cfg.Subjects.SessionEvents(session), jetstream.DeliverNewPolicy)
	if err != nil {
		return nil, fmt.Errorf("producer: follow session %s: %w", session, err)
	}
	f := &follower{feed: fd, done: make(chan struct{}), waiters: map[string][]*waiter{}, lastUsed: time.Now()}
	// The feed outlives this call: it ends with stop, which waits for it.
	rctx, end := context.WithCancel(context.WithoutCancel(ctx))
	f.end = end
	go func() {
		defer close(f.done)
		_ = fd.run(rctx, func(data []byte) error {
			f.dispatch(data)
			return nil
		})
	}()
	f.add(jobID, w)
	p.followers[session] = f
	return f, nil
}

// sweepLocked stops followers that had no waiter for followerIdle, so a
// long-lived producer that touches many sessions keeps few consumers.
func (p *Producer) sweepLocked(ctx context.Context, now time.Time) {
	for s, f := range p.followers {
		f.mu.Lock()
		idle := len(f.waiters) == 0 && now.Sub(f.lastUsed) > followerIdle
		f.mu.Unlock()
		if idle {
			f.stop(ctx)
			delete(p.followers, s)
		}
	}
}

func (f *follower) dispatch(data []byte) {
	ev, err := contracts.DecodeEvent(data)
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, w := range f.waiters[ev.Data.JobID] {
		if w.opts.match(ev.Data.Status) {
			select {
			case w.ch <- ev:
			default:
			}
		}
	}
}

func (f *follower) add(jobID string, w *waiter) {
	f.mu.Lock()
	f.waiters[jobID] = append(f.waiters[jobID], w)
	f.lastUsed = time.Now()
	f.mu.Unlock()
}

func (f *follower) remove(jobID string, w *waiter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ws := f.waiters[jobID]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	f.lastUsed = time.Now()
	if len(ws) == 0 {
		delete(f.waiters, jobID)
	} else {
		f.waiters[jobID] = ws
	}
}

func (f *follower) stop(ctx context.Context) {
	if f.sub != nil {
		_ = f.sub.Unsubscribe()
		return
	}
	f.end()
	<-f.done
	f.feed.close(ctx)
}

// halt is stop for a closing producer, which has no context of its own:
// its consumer's delete is bounded by the feed's first-try bound (1 s at
// most); when that fails (the connection closed first, the server gone),
// the server's inactivity threshold (5 min) removes the consumer.
func (f *follower) halt() {
	f.stop(context.Background())
}

// awaitHooks let internal tests act between the steps of Await.
type awaitHooks struct {
	// followed runs once the session's follower is found or started and
	// the waiter is registered with it.
	followed func(session, jobID string)
	// waiting runs once the job's stored events are read, before Await
	// blocks for new ones.
	waiting func(session, jobID string)
}

func (h *awaitHooks) onFollowed(session, jobID string) {
	if h != nil && h.followed != nil {
		h.followed(session, jobID)
	}
}

func (h *awaitHooks) onWaiting(session, jobID string) {
	if h != nil && h.waiting != nil {
		h.waiting(session, jobID)
	}
}
