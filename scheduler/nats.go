package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/lifecycle"
)

// Headers of NATS message schedules (nats-server ≥ 2.14).
const (
	hdrSchedule         = "Nats-Schedule"
	hdrScheduleTarget   = "Nats-Schedule-Target"
	hdrScheduleTimeZone = "Nats-Schedule-Time-Zone"
	hdrScheduleRollup   = "Nats-Schedule-Rollup"
	hdrScheduleNext     = "Nats-Schedule-Next"
	hdrScheduleID       = "Toolq-Schedule-Id"
)

// NATSConfig configures the NATS-native engine. The zero value is usable.
type NATSConfig struct {
	// Subjects names the streams and buckets; prefix "toolq" by default.
	Subjects contracts.Subjects
	// Replicas of the streams and bucket it creates when they are missing.
	Replicas int
	// Timeout bounds calls whose context has no deadline; 10 s by default.
	Timeout time.Duration
	// Logger receives structured logs; slog.Default() when nil.
	Logger *slog.Logger
	// Observer is told of firings, for metrics (package metrics has the
	// Prometheus one); nil for none.
	Observer Observer
	// Tracer starts a span for each firing (package tracing has the
	// OpenTelemetry one); nil for none.
	Tracer Tracer
}

// NATS is the NATS-native engine. Each schedule is one message on
// <prefix>.schedules.<id> in the schedules stream carrying a Nats-Schedule header
// (@at, @every or a cron pattern with Nats-Schedule-Time-Zone); the server
// fires it by storing a copy on <prefix>.schedules.fire.<id>. A relay — one
// durable consumer shared by every NATS engine instance — turns each firing
// into a job with Nats-Msg-Id "<id>-<fire unix>". Firing rolls up the fire
// subject, so a backlog left by a stopped relay holds only the latest firing
// (catch up once).
type NATS struct {
	*Client
	life  *lifecycle.Service
	loops loops

	cons jetstream.Consumer
	cc   jetstream.ConsumeContext
	// relayCancel ends in-flight relays; Stop calls it after the drain.
	relayCancel context.CancelFunc
}

var _ Scheduler = (*NATS)(nil)

// NewNATS returns the NATS-native engine on connection nc.
func NewNATS(nc *nats.Conn, cfg *NATSConfig) (*NATS, error) {
	var c NATSConfig
	if cfg != nil {
		c = *cfg
	}
	cl, err := NewClient(nc, &ClientConfig{Subjects: c.Subjects, Replicas: c.Replicas, Timeout: c.Timeout, Logger: c.Logger, Observer: c.Observer, Tracer: c.Tracer})
	if err != nil {
		return nil, err
	}
	cl.log = cl.log.With(slog.String("engine", "nats"))
	e := &NATS{Client: cl}
	e.life = lifecycle.New(&lifecycle.Config{Start: e.start, Stop: e.stop, ErrStarted: errStarted})
	return e, nil
}

// relayName is the durable consumer every NATS engine instance shares.
const relayName = "scheduler_relay"

func (e *NATS) fireSubject(id string) string { return e.cfg.Subjects.Schedule("fire") + "." + id }
func (e *NATS) fireWildcard() string         { return e.cfg.Subjects.Schedule("fire") + ".*" }

// Start checks the jobs stream, materializes every stored schedule as a
// schedule message, follows changes and starts the relay. A failed Start
// leaves nothing running and may be retried.
func (e *NATS) Start(ctx context.Context) error { return e.life.Start(ctx) }

func (e *NATS) start(ctx context.Context) error {
	if err := e.run(ctx, e.loops.begin()); err != nil {
		// Clean up even when the failure was ctx running out.
		_ = e.stop(context.WithoutCancel(ctx))
		return err
	}
	return nil
}

func (e *NATS) run(ctx, lctx context.Context) error {
	sctx, cancel := e.withTimeout(ctx)
	defer cancel()
	if err := ensureJobsStream(sctx, e.Client, true); err != nil {
		return err
	}
	if _, err := e.bucket(sctx); err != nil {
		return err
	}
	cons, err := e.js.CreateOrUpdateConsumer(sctx, e.cfg.Subjects.SchedulesStream(), jetstream.ConsumerConfig{
		Durable:       relayName,
		Description:   "toolq scheduler: turns schedule firings into jobs",
		FilterSubject: e.fireWildcard(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 1024,
	})
	if err != nil {
		return fmt.Errorf("scheduler: relay consumer: %w", err)
	}
	e.cons = cons
	ready := make(chan struct{})
	e.loops.goLoop(func() {
		e.follow(lctx, ready, watcher{
			put: func(s *Schedule) { e.materialize(lctx, s) },
			del: func(id string) { e.unmaterialize(lctx, id) },
		})
	})
	select {
	case <-ready:
	case <-sctx.Done():
		return fmt.Errorf("scheduler: loading schedules: %w", sctx.Err())
	}
	// Relays outlive the loops' context: Stop drains them first.
	rctx, rcancel := context.WithCancel(context.WithoutCancel(lctx))
	e.relayCancel = rcancel
	cc, err := cons.Consume(func(msg jetstream.Msg) { e.relay(rctx, msg) }, jetstream.PullMaxMessages(64))
	if err != nil {
		return fmt.Errorf("scheduler: relay: %w", err)
	}
	e.cc = cc
	e.log.Info("scheduler started")
	return nil
}

// Stop stops the relay (a firing being relayed finishes until ctx ends) and
// the watcher. Stop before Start is harmless; a second Stop waits for the
// first.
func (e *NATS) Stop(ctx context.Context) error { return e.life.Stop(ctx) }

func (e *NATS) stop(ctx context.Context) error {
	e.loops.cancelAll()
	if e.cc != nil {
		e.cc.Drain()
		select {
		case <-e.cc.Closed():
		case <-ctx.Done():
			e.cc.Stop()
		}
	}
	if e.relayCancel != nil {
		e.relayCancel()
	}
	e.loops.wg.Wait()
	e.cons, e.cc, e.relayCancel = nil, nil, nil
	return nil
}

// Stopped is closed while the engine is not running: before Start, after a
// failed Start and once Stop has finished.
func (e *NATS) Stopped() <-chan struct{} { return e.life.Stopped() }

// Create stores s and publishes its schedule message at once (the watchers
// of other instances find it already there).
func (e *NATS) Create(ctx context.Context, s *Schedule) (*Schedule, error) {
	created, err := e.Client.Create(ctx, s)
	if err != nil {
		return nil, err
	}
	if e.life.Running() {
		e.materialize(ctx, created)
	}
	return created, nil
}

// Delete removes the schedule and its schedule message at once.
func (e *NATS) Delete(ctx context.Context, id string) error {
	if err := e.Client.Delete(ctx, id); err != nil {
		return err
	}
	ctx, cancel := e.withTimeout(ctx)
	defer cancel()
	e.unmaterialize(ctx, id)
	return nil
}

// materialize publishes s's schedule message unless it exists. The
// expected-last-subject-sequence 0 makes it idempotent across instances, and
// keeps the server's phase of an every schedule across restarts.
func (e *NATS) materialize(ctx context.Context, s *Schedule) {
	ctx, cancel := e.withTimeout(ctx)
	defer cancel()
	if s.Kind() == KindAt {
		// A one-shot schedule whose job was enqueued but which was not yet
		// deleted (a crash in between) must not fire again.
		if last, _, err := e.lastFire(ctx, s.ID); err == nil && !last.Before(s.At) {
			kv, _ := e.bucket(ctx)
			_ = kv.Delete(ctx, defKey(s.ID))
			return
		}
	}
	body, _ := json.Marshal(s)
	msg := nats.NewMsg(e.cfg.Subjects.Schedule(s.ID))
	msg.Data = body
	msg.Header.Set(hdrSchedule, s.natsPattern())
	msg.Header.Set(hdrScheduleTarget, e.fireSubject(s.ID))
	msg.Header.Set(hdrScheduleRollup, nats.MsgRollupSubject)
	msg.Header.Set(hdrScheduleID, s.ID)
	if s.Kind() == KindCron {
		msg.Header.Set(hdrScheduleTimeZone, s.zone())
	}
	_, err := e.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(0))
	switch {
	case err == nil:
		e.log.Debug("schedule materialized", slog.String("id", s.ID), slog.String("pattern", s.natsPattern()))
	case bus.IsWrongLastSequence(err):
		// Already there (another instance, or an earlier run).
	default:
		e.log.Error("schedule message not published", slog.String("id", s.ID), slog.Any("err", err))
	}
}

// unmaterialize removes a schedule's message and any pending firing.
func (e *NATS) unmaterialize(ctx context.Context, id string) {
	ctx, cancel := e.withTimeout(ctx)
	defer cancel()
	st, err := e.js.Stream(ctx, e.cfg.Subjects.SchedulesStream())
	if err != nil {
		e.log.Error("schedule message not removed", slog.String("id", id), slog.Any("err", err))
		return
	}
	for _, subj := range []string{e.cfg.Subjects.Schedule(id), e.fireSubject(id)} {
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
			e.log.Error("schedule message not removed", slog.String("id", id), slog.String("subject", subj), slog.Any("err", err))
		}
	}
}

// relay turns one firing into a job.
func (e *NATS) relay(ctx context.Context, msg jetstream.Msg) {
	id := strings.TrimPrefix(msg.Subject(), e.cfg.Subjects.Schedule("fire")+".")
	log := e.log.With(slog.String("id", id))
	if !contracts.ValidID(id) {
		_ = msg.Term()
		return
	}
	lctx, cancel := e.withTimeout(ctx)
	defer cancel()
	s, err := e.load(lctx, id)
	if errors.Is(err, ErrNotFound) {
		// Deleted: this firing and the schedule message go.
		_ = msg.Ack()
		e.unmaterialize(lctx, id)
		return
	}
	if err != nil {
		log.Warn("firing not relayed, retrying", slog.Any("err", err))
		_ = msg.NakWithDelay(retryDelay)
		return
	}
	t := e.fireTime(s, msg)
	if t.IsZero() {
		log.Warn("firing without a fire time dropped")
		_ = msg.Ack()
		return
	}
	if _, err := e.fire(lctx, s, t); err != nil {
		if ctx.Err() != nil {
			_ = msg.Nak()
			return
		}
		log.Warn("firing not relayed, retrying", slog.Any("err", err))
		_ = msg.NakWithDelay(retryDelay)
		return
	}
	_ = msg.Ack()
}

// fireTime is the time a server-made firing stands for. The server strips
// Nats-Msg-Id and copies the schedule message's body unchanged, but it adds
// Nats-Schedule-Next: "purge" for @at, else the next fire time, from which
// the current one follows (Next - Every; the cron time before Next). A
// firing without the header falls back to the latest fire time at or before
// the moment the server stored it.
func (e *NATS) fireTime(s *Schedule, msg jetstream.Msg) time.Time {
	if s.Kind() == KindAt {
		return s.At
	}
	if next, err := time.Parse(time.RFC3339Nano, msg.Headers().Get(hdrScheduleNext)); err == nil {
		switch s.Kind() {
		case KindEvery:
			return next.Add(-s.Every).Truncate(time.Second)
		case KindCron:
			if t := s.Latest(next.Add(-time.Second)); !t.IsZero() {
				return t
			}
		}
	}
	md, err := msg.Metadata()
	if err != nil {
		return time.Time{}
	}
	if t := s.Latest(md.Timestamp); !t.IsZero() {
		return t
	}
	return md.Timestamp.Truncate(time.Second)
}
