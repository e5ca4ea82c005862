package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// Replays. A named tenant has no JetStream of its own (its account imports
// only its own subspace), so it cannot create the consumer that replays a
// session's stored events. It asks instead on <prefix>.replay.<session>,
// which its import maps to <prefix>.t.<tenant>.replay.<session>; a worker
// serving tenants reads the tenant from that subject (never from the
// body), replays that tenant's session only, and answers with a stream of
// messages to the reply subject.
const (
	// maxReplayEvents bounds one replay; the end says when more were stored.
	maxReplayEvents = 10_000
	// maxReplays is how many replays one worker runs at once, and
	// maxTenantReplays how many of them one tenant's; a request past
	// either is answered at once with a busy error, which the requester's
	// producer asks again after a pause (another worker of the queue group
	// may take it). So a tenant that floods replays fills its own share,
	// never every slot: the others' replays still run.
	maxReplays       = 8
	maxTenantReplays = 2
	// replayQueue is the queue group of the replay subscriptions, so one
	// worker answers each request.
	replayQueue = "toolq_replay"
)

// replayCounts is the replays running on a worker, in all and by tenant.
type replayCounts struct {
	mu    sync.Mutex
	total int
	by    map[string]int
	// hold, when set (tests), is waited on by each replay once it has its
	// slot, until it is closed.
	hold atomic.Pointer[chan struct{}]
}

// take counts a replay of tenant, or says why it has no slot: the worker
// runs maxReplays already, or the tenant its share of them.
func (c *replayCounts) take(tenant string) (refused string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.total >= maxReplays:
		return "too many replays on this worker"
	case c.by[tenant] >= maxTenantReplays:
		return "this tenant's replays already running on this worker"
	}
	if c.by == nil {
		c.by = map[string]int{}
	}
	c.total++
	c.by[tenant]++
	return ""
}

func (c *replayCounts) done(tenant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total--
	if c.by[tenant]--; c.by[tenant] <= 0 {
		delete(c.by, tenant)
	}
}

// startReplays subscribes to every named tenant's replay requests.
func (w *Worker) startReplays() error {
	sub, err := w.nc.QueueSubscribe(w.cfg.Subjects.TenantReplays(), replayQueue, w.onReplay)
	if err != nil {
		return fmt.Errorf("worker: subscribe replays: %w", err)
	}
	w.subs = append(w.subs, sub)
	return nil
}

// onReplay checks a replay request's subject and hands the request to a
// goroutine of its own, when the worker and the tenant have a slot free.
func (w *Worker) onReplay(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	tenant, ok := w.cfg.Subjects.TenantOf(m.Subject)
	session := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	if !ok || tenant == "" || !contracts.ValidID(session) {
		replayRefused(m, "invalid_input: replay subject names no tenant and session")
		return
	}
	if why := w.replays.take(tenant); why != "" {
		replayRefused(m, contracts.ReplayBusy+": "+why+"; ask again")
		return
	}
	w.loops.Add(1)
	go func() {
		defer w.loops.Done()
		defer w.replays.done(tenant)
		if hold := w.replays.hold.Load(); hold != nil {
			<-*hold
		}
		w.replay(m, tenant, session)
	}()
}

// replay answers one request of tenant: the stored events of session (or
// one job of it), oldest first, then the end.
func (w *Worker) replay(m *nats.Msg, tenant, session string) {
	req, err := contracts.DecodeReplayRequest(m.Data)
	if err != nil {
		replayRefused(m, err.Error())
		return
	}
	filter := w.cfg.Subjects.TenantEvent(tenant, session, "*")
	if req.JobID != "" {
		filter = w.cfg.Subjects.TenantEvent(tenant, session, req.JobID)
	}
	ctx, cancel := context.WithTimeout(w.runCtx, time.Minute)
	defer cancel()
	sent, more, err := w.sendReplay(ctx, m.Reply, filter, req.Since)
	log := w.log.With(slog.String("tenant", tenant), slog.String("session", session))
	if err != nil {
		log.Warn("replay cut short", slog.Int("sent", sent), slog.Any("err", err))
		replayRefused(m, "internal_error: replay cut short after "+strconv.Itoa(sent)+" events")
		return
	}
	end := nats.NewMsg(m.Reply)
	end.Header.Set(contracts.ReplayEndHeader, strconv.Itoa(sent))
	if more {
		end.Header.Set(contracts.ReplayTruncatedHeader, "true")
	}
	if err := w.nc.PublishMsg(end); err != nil {
		log.Warn("replay end not sent", slog.Any("err", err))
	}
}

// sendReplay publishes the stored events on filter to reply, from the
// first stored at or after since (all when zero), at most maxReplayEvents
// of them; more says some were left.
func (w *Worker) sendReplay(ctx context.Context, reply, filter string, since time.Time) (sent int, more bool, err error) {
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if !since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := w.js.OrderedConsumer(ctx, w.cfg.Subjects.EventsStream(), cfg)
	if err != nil {
		return 0, false, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, false, err
	}
	pending := info.NumPending
	for pending > 0 && sent < maxReplayEvents {
		batch, err := cons.Fetch(min(int(pending), maxReplayEvents-sent, 256), jetstream.FetchContext(ctx)) //nolint:gosec // G115: bounded by maxReplayEvents
		if err != nil {
			return sent, false, err
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			out := nats.NewMsg(reply)
			out.Data = msg.Data()
			md, err := msg.Metadata()
			if err == nil {
				pending = md.NumPending
				out.Header.Set(contracts.ReplayStoredHeader, md.Timestamp.UTC().Format(time.RFC3339Nano))
			}
			if err := w.nc.PublishMsg(out); err != nil {
				return sent, false, err
			}
			sent++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return sent, false, err
		}
		if n == 0 {
			break
		}
	}
	// Flush so the end cannot overtake the events on the way out.
	if err := w.nc.FlushWithContext(ctx); err != nil {
		return sent, false, err
	}
	return sent, pending > 0, nil
}

// replayRefused answers a replay request with an error and no events.
func replayRefused(m *nats.Msg, reason string) {
	end := nats.NewMsg(m.Reply)
	end.Header.Set(contracts.ReplayEndHeader, "0")
	end.Header.Set(contracts.ReplayErrorHeader, reason)
	_ = m.RespondMsg(end)
}
