package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// ReadOpts are the optional knobs of ReadEvents.
type ReadOpts struct {
	// Follow keeps reading new events until ctx ends; otherwise ReadEvents
	// returns once it has read every stored event.
	Follow bool
	// JobID narrows the read to one job.
	JobID string
}

// ReadEvents calls fn with every stored event of session, oldest first, and
// with new ones as they arrive when opts.Follow is set. On a tenant account
// (Config.TenantAccount) a worker serving tenants replays the stored
// events, 10,000 at a time, and ReadEvents asks for the next page until it
// has them all.
func (p *Producer) ReadEvents(ctx context.Context, session string, opts *ReadOpts, fn func(*contracts.Event) error) error {
	if err := contracts.ValidateID("session", session); err != nil {
		return err
	}
	var o ReadOpts
	if opts != nil {
		o = *opts
	}
	if o.JobID != "" {
		if err := contracts.ValidateID("job id", o.JobID); err != nil {
			return err
		}
	}
	if p.cfg.TenantAccount {
		return p.readImported(ctx, session, o, fn)
	}
	filter := p.cfg.Subjects.SessionEvents(session)
	if o.JobID != "" {
		filter = p.cfg.Subjects.Event(session, o.JobID)
	}
	if o.Follow {
		return p.followEvents(ctx, filter, fn)
	}
	// Setting up can fail for a moment (a cluster electing a leader, a
	// reconnect); like Await, ReadEvents tries again until ctx ends.
	var (
		cons jetstream.Consumer
		info *jetstream.ConsumerInfo
	)
	err := p.retrying(ctx, "read events of "+session, func() error {
		cctx, cancel := p.withTimeout(ctx)
		defer cancel()
		var err error
		if cons, err = p.js.OrderedConsumer(cctx, p.cfg.Subjects.EventsStream(), jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{filter},
			DeliverPolicy:  jetstream.DeliverAllPolicy,
		}); err != nil {
			return err
		}
		info, err = cons.Info(cctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("producer: read events: %w", err)
	}
	if info.NumPending == 0 {
		return nil
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("producer: read events: %w", err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("producer: read events: %w", err)
		}
		ev, derr := contracts.DecodeEvent(m.Data())
		if derr == nil {
			if err := fn(ev); err != nil {
				if errors.Is(err, ErrStop) {
					return nil
				}
				return err
			}
		}
		md, err := m.Metadata()
		if err == nil && md.NumPending == 0 {
			return nil
		}
	}
}

// followEvents is ReadEvents with Follow: a feed from the first stored
// event on, which makes its consumer again when it is lost (a server of a
// cluster died), from the event after the last it passed on.
func (p *Producer) followEvents(ctx context.Context, filter string, fn func(*contracts.Event) error) error {
	var fd *feed
	err := p.retrying(ctx, "follow events of "+filter, func() error {
		var err error
		fd, err = p.openFeed(ctx, filter, jetstream.DeliverAllPolicy)
		return err
	})
	if err != nil {
		return fmt.Errorf("producer: read events: %w", err)
	}
	defer fd.close(ctx)
	err = fd.run(ctx, func(data []byte) error {
		ev, err := contracts.DecodeEvent(data)
		if err != nil {
			return nil // not an event: skipped, as when reading
		}
		return fn(ev)
	})
	if errors.Is(err, ErrStop) {
		return nil
	}
	return err
}

// The pending limits of a tenant read's subscriptions, held by the client
// (not a channel of a few hundred, which a busy reader overflowed). A
// replay answers with at most 10,000 events and an end, so its
// subscription holds all of them; the live subscription holds
// Config.TenantFollowPending events, and its overflow is seen and mended,
// never silent.
const (
	replayPendingMsgs = 10_000 + 64
	readPendingBytes  = 256 << 20
)

// replayMargin is how long before the newest event a read has passed it
// asks for the next page of a replay, or for the events its live
// subscription dropped. Events are stamped by the workers that write them
// and stored at the server's time; a minute covers their clocks' skew and
// the time an event spends on the way. What comes again in the margin is
// passed once (tenantRead.seen).
const replayMargin = time.Minute

// tenantRead is one ReadEvents on a tenant account: the events it passed,
// so that one that comes twice (by the replay and the live subscription,
// or in two replays' overlap) is passed once.
type tenantRead struct {
	fn func(*contracts.Event) error
	// seen holds the passed events' ids with their times, back to
	// replayMargin (and a minute more) before the newest: older ones
	// cannot come again, as no replay asks from before that.
	seen   map[string]time.Time
	newest time.Time
	passed int
	// stored is the server's time of the last replayed event, when the
	// worker said it: the next page starts there.
	stored time.Time
}

func (r *tenantRead) deliver(data []byte) error {
	ev, err := contracts.DecodeEvent(data)
	if err != nil {
		return nil // not an event: skipped
	}
	if _, dup := r.seen[ev.ID]; dup {
		return nil
	}
	r.seen[ev.ID] = ev.Time
	if ev.Time.After(r.newest) {
		r.newest = ev.Time
	}
	if r.passed++; r.passed%1024 == 0 {
		cut := r.since().Add(-time.Minute)
		for id, at := range r.seen {
			if at.Before(cut) {
				delete(r.seen, id)
			}
		}
	}
	return r.fn(ev)
}

// since is where the next replay starts: replayMargin before the newest
// event passed, or the first event when none was.
func (r *tenantRead) since() time.Time {
	if r.newest.IsZero() {
		return time.Time{}
	}
	return r.newest.Add(-replayMargin)
}

// readImported is ReadEvents on a tenant account, which has no JetStream:
// a worker serving tenants replays the stored events (ask on
// <prefix>.replay.<session>, answered as a stream of messages, up to
// 10,000 a replay; a longer history is read in pages, each asked from
// shortly before the newest event passed), and, when following, the live
// events come by a plain subscription to the imported event subjects,
// opened before the replay so that nothing falls between the two; an
// event that came both ways is passed once. When the live subscription
// overflows (the reader fell behind by more than its pending limit), the
// events it dropped are stored: ReadEvents asks for a replay from shortly
// before the newest event it passed, and passes the events it has not
// passed yet, late but not lost.
func (p *Producer) readImported(ctx context.Context, session string, o ReadOpts, fn func(*contracts.Event) error) error {
	subject := p.cfg.Subjects.SessionEvents(session)
	if o.JobID != "" {
		subject = p.cfg.Subjects.Event(session, o.JobID)
	}
	var live *nats.Subscription
	if o.Follow {
		var err error
		if live, err = p.pendingSub(subject, p.cfg.TenantFollowPending); err != nil {
			return fmt.Errorf("producer: follow events: %w", err)
		}
		defer func() { _ = live.Unsubscribe() }()
	}
	r := &tenantRead{fn: fn, seen: map[string]time.Time{}}
	err := p.replayAll(ctx, session, o.JobID, r)
	if errors.Is(err, ErrStop) {
		return nil
	}
	if err != nil || !o.Follow {
		return err
	}
	for {
		m, err := live.NextMsgWithContext(ctx)
		switch {
		case errors.Is(err, nats.ErrSlowConsumer):
			p.log.Warn("tenant event read fell behind; replaying what it missed", "session", session)
			err = p.replayAll(ctx, session, o.JobID, r)
		case err == nil:
			err = r.deliver(m.Data)
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			err = fmt.Errorf("producer: follow events: %w", err)
		}
		if errors.Is(err, ErrStop) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// replayAll replays the session's events from r.since() on, then page by
// page until a replay is not truncated, each page from the server's time
// of the last event of the one before (its events at that very time come
// again and are passed once). A page that passes nothing new would be
// asked again forever: that fails instead.
func (p *Producer) replayAll(ctx context.Context, session, jobID string, r *tenantRead) error {
	since := r.since()
	for {
		before := r.passed
		r.stored = time.Time{}
		truncated, err := p.replayWhenFree(ctx, session, jobID, since, r)
		if err != nil || !truncated {
			return err
		}
		if r.passed == before {
			return fmt.Errorf("producer: replay events of %s: a page of the replay passed no new event; read them by job (JobID)", session)
		}
		since = r.stored
		if since.IsZero() { // a worker that does not say: from the events' own times
			since = r.since()
		}
	}
}

// replayBusyWait bounds how long a read without a deadline asks again
// while the workers answer that their replays are busy.
const replayBusyWait = time.Minute

// errReplayBusy is a replay refused for want of a free slot on the worker
// that took the request, before it sent any event.
var errReplayBusy = errors.New("producer: replay refused: the worker is busy")

// replayWhenFree is replay, asked again after a pause when a worker
// refuses it as busy (each worker runs a few replays at once, and a few of
// each tenant's); the queue group may hand the next request to another
// worker. A busy worker is working, and its replays end: the read asks
// until ctx ends, or, for a ctx without a deadline, for up to
// replayBusyWait or Config.Timeout, whichever is longer.
func (p *Producer) replayWhenFree(ctx context.Context, session, jobID string, since time.Time, r *tenantRead) (bool, error) {
	pause, giveUp := 50*time.Millisecond, time.Now().Add(max(p.cfg.Timeout, replayBusyWait))
	if d, ok := ctx.Deadline(); ok {
		giveUp = d
	}
	for {
		truncated, err := p.replay(ctx, session, jobID, since, r)
		if !errors.Is(err, errReplayBusy) || time.Now().After(giveUp) {
			return truncated, err
		}
		p.log.Debug("replay busy; asking again", "session", session, "pause", pause)
		if !sleepCtx(ctx, pause) {
			return false, fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		pause = min(2*pause, time.Second)
	}
}

// pendingSub subscribes synchronously to subject, holding up to msgs
// messages.
func (p *Producer) pendingSub(subject string, msgs int) (*nats.Subscription, error) {
	sub, err := p.nc.SubscribeSync(subject)
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(msgs, readPendingBytes); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return sub, nil
}

// replay asks a worker for the session's events stored from since on (all
// when zero) and passes each to r until the end message; truncated
// says the worker had more than one replay sends. A replay that
// overflowed the reader's pending limits fails: it lost events in the
// middle, and passing the rest would pass them out of order.
func (p *Producer) replay(ctx context.Context, session, jobID string, since time.Time, r *tenantRead) (truncated bool, err error) {
	inbox := p.nc.NewRespInbox()
	sub, err := p.pendingSub(inbox, replayPendingMsgs)
	if err != nil {
		return false, fmt.Errorf("producer: replay events: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	var body []byte
	if jobID != "" || !since.IsZero() {
		body, _ = json.Marshal(contracts.ReplayRequest{JobID: jobID, Since: since})
	}
	req := nats.NewMsg(p.cfg.Subjects.Replay(session))
	req.Reply, req.Data = inbox, body
	if err := p.nc.PublishMsg(req); err != nil {
		return false, fmt.Errorf("producer: replay events: %w", err)
	}
	for {
		// The timeout is between messages: a long replay is fine as long
		// as it keeps coming.
		wctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
		m, err := sub.NextMsgWithContext(wctx)
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return false, ctx.Err()
		case errors.Is(err, nats.ErrSlowConsumer):
			return false, fmt.Errorf("producer: replay events of %s: the reader fell behind by more than %d MB and events were dropped", session, readPendingBytes>>20)
		case errors.Is(err, context.DeadlineExceeded):
			return false, fmt.Errorf("producer: replay events of %s: no answer within %s (is a worker serving tenants running?)", session, p.cfg.Timeout)
		default:
			return false, fmt.Errorf("producer: replay events of %s: %w", session, err)
		}
		if m.Header.Get(contracts.ReplayEndHeader) != "" {
			if reason := m.Header.Get(contracts.ReplayErrorHeader); reason != "" {
				if strings.HasPrefix(reason, contracts.ReplayBusy) {
					return false, fmt.Errorf("%w: %s", errReplayBusy, reason)
				}
				return false, fmt.Errorf("producer: replay events of %s: %s", session, reason)
			}
			return m.Header.Get(contracts.ReplayTruncatedHeader) != "", nil
		}
		if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
			return false, fmt.Errorf("producer: replay events of %s: no worker serves tenants' replays", session)
		}
		if at, err := time.Parse(time.RFC3339Nano, m.Header.Get(contracts.ReplayStoredHeader)); err == nil {
			r.stored = at
		}
		if err := r.deliver(m.Data); err != nil {
			return false, err
		}
	}
}
