package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// DefaultFollowHeartbeat is the idle heartbeat a session's follower asks of
// its consumer, unless Config.FollowHeartbeat says otherwise. Two missed
// heartbeats (2 s) make the follower make its consumer again.
const DefaultFollowHeartbeat = time.Second

// feed follows one filter subject of the events stream through an
// ephemeral R1 consumer of its own, and passes each message on once, in
// stream order. When the consumer stops answering — two heartbeats missed
// (its server died, or the connection moved to a server it does not
// reach), the server says it was deleted, or a delivery skips a consumer
// sequence — the feed makes a new one that starts at the stream sequence
// after the last message it passed on, so a message is neither lost nor
// passed on twice.
//
// It replaces jetstream's ordered consumer, which does the same after a
// 5 s heartbeat missed twice, and then retries the consumer's creation with
// 10 s requests and a backoff to 10 s: in a cluster whose meta leader died
// with the consumer's server, that took 11–20 s to come back, against
// 5–7 s for the workers.
type feed struct {
	js     jetstream.JetStream
	log    *slog.Logger
	stream string
	filter string
	hb     time.Duration
	// tryFor bounds the first request to make a consumer again, doubling
	// for each one unanswered up to maxTry: a request nobody answers (no
	// meta leader yet, or the consumer placed on the dead server) is
	// made again soon, and a slow cluster still gets the time it needs.
	tryFor, maxTry time.Duration
	prefix         string

	// Owned by run (and by open before it).
	cons   jetstream.Consumer
	serial int
	cursor uint64 // the stream sequence of the last message passed on

	remade atomic.Int64 // consumers made again; read by tests
	polled atomic.Int64 // messages passed on by direct gets; read by tests
	// deletes are the goroutines deleting replaced consumers; stop waits.
	deletes sync.WaitGroup
}

// errConsumerLost ends a feed's pull: its consumer stopped answering.
var errConsumerLost = errors.New("producer: session follower's consumer lost")

// openFeed makes the feed's first consumer, delivering as policy says
// (DeliverNewPolicy or DeliverAllPolicy). Once it returns, every message
// stored later on filter reaches run's fn.
func (p *Producer) openFeed(ctx context.Context, filter string, policy jetstream.DeliverPolicy) (*feed, error) {
	f := &feed{
		js: p.js, log: p.log, stream: p.cfg.Subjects.EventsStream(), filter: filter,
		hb: p.cfg.FollowHeartbeat, tryFor: min(p.cfg.Timeout, followTryFor), maxTry: p.cfg.Timeout,
		prefix: nuid.Next(),
	}
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	cons, err := f.create(ctx, policy)
	if err != nil {
		return nil, err
	}
	f.cons = cons
	if policy == jetstream.DeliverNewPolicy {
		// The server starts a new-only consumer after the stream's last
		// message and says so in its delivered stream sequence: a
		// consumer made again later starts right after it.
		f.cursor = cons.CachedInfo().Delivered.Stream
	}
	return f, nil
}

// followTryFor bounds the first request to make a lost consumer again.
const followTryFor = time.Second

func (f *feed) create(ctx context.Context, policy jetstream.DeliverPolicy) (jetstream.Consumer, error) {
	f.serial++
	cfg := jetstream.ConsumerConfig{
		Name:              fmt.Sprintf("%s_%d", f.prefix, f.serial),
		DeliverPolicy:     policy,
		AckPolicy:         jetstream.AckNonePolicy,
		FilterSubject:     f.filter,
		InactiveThreshold: 5 * time.Minute,
		Replicas:          1,
		MemoryStorage:     true,
	}
	if policy == jetstream.DeliverByStartSequencePolicy {
		cfg.OptStartSeq = f.cursor + 1
	}
	cons, err := f.js.CreateConsumer(ctx, f.stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("producer: follow %s: %w", f.filter, err)
	}
	return cons, nil
}

// run passes every message to fn, in stream order and once each, until ctx
// ends (it returns ctx's error) or fn fails (it returns fn's error). It
// makes the consumer again whenever it is lost.
func (f *feed) run(ctx context.Context, fn func([]byte) error) error {
	pause, tryFor := followRetryMin, f.tryFor
	for {
		if f.cons == nil {
			cctx, cancel := context.WithTimeout(ctx, tryFor)
			cons, err := f.create(cctx, jetstream.DeliverByStartSequencePolicy)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				// An unanswered create may still be carried out (or be
				// placed on the dead server): delete what it made.
				f.forget(ctx, fmt.Sprintf("%s_%d", f.prefix, f.serial))
				f.log.Debug("remaking a session follower's consumer", slog.String("filter", f.filter), slog.Any("err", err))
				// Meanwhile, what the stream stored is read without a
				// consumer.
				if err := f.poll(ctx, fn); err != nil {
					return err
				}
				if !sleepCtx(ctx, pause) {
					return ctx.Err()
				}
				pause, tryFor = min(2*pause, followRetryMax), min(2*tryFor, f.maxTry)
				continue
			}
			f.cons, pause, tryFor = cons, followRetryMin, f.tryFor
			f.remade.Add(1)
		}
		err := f.pull(ctx, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !errors.Is(err, errConsumerLost) {
			return err
		}
		f.log.Debug("session follower's consumer lost", slog.String("filter", f.filter), slog.Any("err", err))
		f.drop(ctx)
	}
}

// poll passes on what the stream stored after the cursor, read by direct
// gets, while no consumer can be made (a cluster without a meta leader
// answers no consumer create for seconds). Any replica answers a direct
// get, so neither the meta leader nor the stream's leader is needed. A
// replica holds a prefix of the stream, so the first message at or after
// a sequence that it returns is the first the stream has there, however
// far behind the replica is: nothing is skipped, and the cursor moves as
// when consuming. It stops at the first answer that is not a message
// (none stored yet, no answer, an error), or after followPollMax.
func (f *feed) poll(ctx context.Context, fn func([]byte) error) error {
	nc := f.js.Conn()
	for range followPollMax {
		body, err := json.Marshal(directGet{Seq: f.cursor + 1, NextBySubject: f.filter})
		if err != nil {
			return nil
		}
		rctx, cancel := context.WithTimeout(ctx, f.tryFor)
		m, err := nc.RequestWithContext(rctx, "$JS.API.DIRECT.GET."+f.stream, body)
		cancel()
		if err != nil || m.Header.Get("Status") != "" {
			return nil // nothing more now; the consumer or the next poll brings it
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil || seq <= f.cursor {
			return nil
		}
		f.cursor = seq
		f.polled.Add(1)
		if err := fn(m.Data); err != nil {
			return err
		}
	}
	return nil
}

// directGet is the request of a direct get of the next message of a
// subject from a sequence on.
type directGet struct {
	Seq           uint64 `json:"seq"`
	NextBySubject string `json:"next_by_subj"`
}

// followPollMax is how many messages one poll passes on at most before
// the feed tries to make its consumer again.
const followPollMax = 1024

// followRetryMin and followRetryMax bound the pause between attempts to
// make a lost consumer again.
const (
	followRetryMin = 100 * time.Millisecond
	followRetryMax = time.Second
)

// pull reads the current consumer until it fails: errConsumerLost wraps
// the cause.
func (f *feed) pull(ctx context.Context, fn func([]byte) error) error {
	it, err := f.cons.Messages(
		jetstream.PullMaxMessages(1024),
		jetstream.PullHeartbeat(f.hb),
		jetstream.PullExpiry(max(30*time.Second, 4*f.hb)),
		jetstream.WithMessagesErrOnMissingHeartbeat(true),
	)
	if err != nil {
		return fmt.Errorf("%w: %w", errConsumerLost, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	var dseq uint64 // the consumer sequence of the last delivery
	for {
		m, err := it.Next()
		if err != nil {
			return fmt.Errorf("%w: %w", errConsumerLost, err)
		}
		md, err := m.Metadata()
		if err != nil {
			continue // not a JetStream message: nothing to pass on
		}
		if md.Sequence.Consumer != dseq+1 {
			return fmt.Errorf("%w: delivery %d after %d", errConsumerLost, md.Sequence.Consumer, dseq)
		}
		dseq = md.Sequence.Consumer
		if md.Sequence.Stream <= f.cursor {
			continue // passed on already, by a consumer before this one
		}
		f.cursor = md.Sequence.Stream
		if err := fn(m.Data()); err != nil {
			return err
		}
	}
}

// drop forgets the lost consumer and deletes it on the side (it may live
// on a server that still answers); the server's inactivity threshold
// removes it otherwise.
func (f *feed) drop(ctx context.Context) {
	name := f.cons.CachedInfo().Name
	f.cons = nil
	f.forget(ctx, name)
}

// forget deletes consumer name on the side, also once ctx has ended.
func (f *feed) forget(ctx context.Context, name string) {
	base := context.WithoutCancel(ctx)
	f.deletes.Go(func() {
		ctx, cancel := context.WithTimeout(base, f.tryFor)
		defer cancel()
		_ = f.js.DeleteConsumer(ctx, f.stream, name)
	})
}

// close deletes the feed's consumer, once run has returned, and waits for
// every delete it started.
func (f *feed) close(ctx context.Context) {
	if f.cons != nil {
		f.drop(ctx)
	}
	f.deletes.Wait()
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
