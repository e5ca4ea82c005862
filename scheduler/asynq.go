package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/lifecycle"
	"github.com/toolq/toolq/producer"
)

// Task types of the asynq engine.
const (
	// TaskTick is enqueued by asynq's Scheduler on every periodic firing.
	TaskTick = "toolq:tick"
	// TaskAt is enqueued with ProcessAt for a delayed schedule.
	TaskAt = "toolq:at"
	// TaskSubmit is the ingress: a service on asynq enqueues it on the
	// engine's queue (DefaultQueue unless AsynqConfig.Queue says otherwise)
	// with a SubmitPayload, and it becomes a toolq job.
	TaskSubmit = "toolq:submit"
)

// DefaultQueue is the asynq queue of the engine's tasks.
const DefaultQueue = "toolq"

// AsynqConfig configures the asynq engine.
type AsynqConfig struct {
	// Redis is the Redis connection (asynq.RedisClientOpt, or
	// asynq.ParseRedisURI of a redis:// URL). Required.
	Redis asynq.RedisConnOpt
	// Subjects names the streams and buckets; prefix "toolq" by default.
	Subjects contracts.Subjects
	// Replicas of the streams and bucket it creates when they are missing.
	Replicas int
	// Timeout bounds NATS calls whose context has no deadline; 10 s by default.
	Timeout time.Duration
	// Queue is the asynq queue of the engine's tasks (and of the ingress);
	// DefaultQueue by default.
	Queue string
	// Concurrency is the number of tasks handled at once; 10 by default.
	Concurrency int
	// PollInterval is how often asynq looks for due delayed tasks and for
	// new tasks when idle; 100 ms by default (asynq's own defaults, 5 s and
	// 1 s, would make a delayed job late by seconds).
	PollInterval time.Duration
	// RedisCheckInterval is how often the engine checks whether Redis lost
	// its data (a restart without persistence); then it enqueues the delayed
	// schedules again and catches periodic ones up. 1 s by default.
	RedisCheckInterval time.Duration
	// StopTimeout is how long Stop lets in-flight tasks finish; 10 s by default.
	StopTimeout time.Duration
	// DisableIngress leaves out the handler of TaskSubmit.
	DisableIngress bool
	// Logger receives structured logs; slog.Default() when nil.
	Logger *slog.Logger
	// Observer is told of firings, for metrics (package metrics has the
	// Prometheus one); nil for none.
	Observer Observer
	// Tracer starts a span for each firing (package tracing has the
	// OpenTelemetry one); nil for none.
	Tracer Tracer
}

// Asynq is the asynq engine: schedules live in the NATS KV bucket; periodic
// ones are entries of an asynq.Scheduler (enqueueing TaskTick), delayed
// ones TaskAt tasks enqueued with asynq.ProcessAt; an asynq.Server handles
// both by publishing the job to JetStream.
//
// asynq's Scheduler enqueues every entry once per instance, so two
// instances enqueue each tick twice; the tick's handler maps it to the
// schedule's fire time (the latest one at or before now), and the job's
// Nats-Msg-Id "<id>-<fire unix>" makes JetStream keep one. Every schedules
// are registered at a second on their grid (Anchor + k*Every), so every
// instance ticks in phase with it.
type Asynq struct {
	*Client
	cfg   AsynqConfig
	life  *lifecycle.Service
	loops loops

	aclient   *asynq.Client
	inspector *asynq.Inspector
	sched     *asynq.Scheduler
	server    *asynq.Server
	rdb       redis.UniversalClient
	// awaiter awaits the ingress's jobs; one per run, closed by stop, so
	// its session followers end with the engine.
	awaiter *producer.Producer
	// missed is set when the Scheduler could not enqueue a tick; the Redis
	// monitor catches up once Redis answers.
	missed atomic.Bool

	mu      sync.Mutex
	entries map[string]*entry
	closing bool
}

type entry struct {
	s       *Schedule
	entryID string      // asynq Scheduler entry
	timer   *time.Timer // pending aligned registration of an every schedule
}

var _ Scheduler = (*Asynq)(nil)

// NewAsynq returns the asynq engine. It connects to nothing until Start.
func NewAsynq(nc *nats.Conn, cfg *AsynqConfig) (*Asynq, error) {
	if cfg == nil || cfg.Redis == nil {
		return nil, errors.New("scheduler: asynq engine needs a Redis connection")
	}
	c := *cfg
	if c.Queue == "" {
		c.Queue = DefaultQueue
	}
	if c.Concurrency == 0 {
		c.Concurrency = 10
	}
	if c.PollInterval == 0 {
		c.PollInterval = 100 * time.Millisecond
	}
	if c.RedisCheckInterval == 0 {
		c.RedisCheckInterval = time.Second
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = 10 * time.Second
	}
	if c.Concurrency < 1 || c.PollInterval < 0 || c.RedisCheckInterval < 0 || c.StopTimeout < 0 {
		return nil, errors.New("scheduler: asynq config out of range")
	}
	cl, err := NewClient(nc, &ClientConfig{Subjects: c.Subjects, Replicas: c.Replicas, Timeout: c.Timeout, Logger: c.Logger, Observer: c.Observer, Tracer: c.Tracer})
	if err != nil {
		return nil, err
	}
	cl.log = cl.log.With(slog.String("engine", "asynq"))
	c.Logger = cl.log
	e := &Asynq{Client: cl, cfg: c, entries: map[string]*entry{}}
	e.life = lifecycle.New(&lifecycle.Config{Start: e.start, Stop: e.stop, ErrStarted: errStarted})
	return e, nil
}

// SubmitPayload is the payload of a TaskSubmit task: a job for toolq. The
// job id is ID, or "asynq-<task id>" when empty, so a retried task does not
// enqueue a second job within the duplicate window.
type SubmitPayload struct {
	ID          string            `json:"id,omitempty"`
	Tool        string            `json:"tool"`
	Session     string            `json:"session,omitempty"`
	Input       json.RawMessage   `json:"input,omitempty"`
	TimeoutMs   int64             `json:"timeout_ms,omitempty"`
	MaxAttempts int               `json:"max_attempts,omitempty"`
	Meta        map[string]string `json:"meta,omitempty"`
	// NoWait ends the task once the job is enqueued; by default the task
	// waits for the job's terminal event and stores it as the task's result
	// (kept as long as the task's asynq.Retention).
	NoWait bool `json:"no_wait,omitempty"`
}

type tickPayload struct {
	ID string `json:"id"`
}

type atPayload struct {
	ID string `json:"id"`
	At int64  `json:"at"`
}

func (e *Asynq) markerKey() string { return "toolq:" + e.Bucket() + ":alive" }

// Start connects to Redis, registers every stored schedule, catches missed
// periodic firings up once and runs asynq's Scheduler and Server. A failed
// Start leaves nothing running and may be retried.
func (e *Asynq) Start(ctx context.Context) error { return e.life.Start(ctx) }

func (e *Asynq) start(ctx context.Context) error {
	// A new run: nothing of an earlier one is left to register or shut down.
	e.mu.Lock()
	e.closing, e.entries = false, map[string]*entry{}
	e.mu.Unlock()
	e.aclient, e.inspector, e.sched, e.server, e.rdb, e.awaiter = nil, nil, nil, nil, nil, nil
	if err := e.run(ctx, e.loops.begin()); err != nil {
		// Clean up even when the failure was ctx running out.
		_ = e.stop(context.WithoutCancel(ctx))
		return err
	}
	return nil
}

func (e *Asynq) run(ctx, lctx context.Context) error {
	sctx, cancel := e.withTimeout(ctx)
	defer cancel()
	if err := ensureJobsStream(sctx, e.Client, false); err != nil {
		return err
	}
	if _, err := e.bucket(sctx); err != nil {
		return err
	}
	aw, err := producer.New(e.nc, &producer.Config{Subjects: e.Client.cfg.Subjects, Timeout: e.Client.cfg.Timeout, Logger: e.log, Name: "scheduler-ingress"})
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	e.awaiter = aw
	rc, ok := e.cfg.Redis.MakeRedisClient().(redis.UniversalClient)
	if !ok {
		return fmt.Errorf("scheduler: unsupported Redis option %T", e.cfg.Redis)
	}
	e.rdb = rc
	if err := rc.Ping(sctx).Err(); err != nil {
		return fmt.Errorf("scheduler: redis: %w", err)
	}
	alog := &asynqLogger{log: e.log}
	e.aclient = asynq.NewClient(e.cfg.Redis)
	e.inspector = asynq.NewInspector(e.cfg.Redis)
	e.sched = asynq.NewScheduler(e.cfg.Redis, &asynq.SchedulerOpts{
		Logger:   alog,
		LogLevel: asynq.WarnLevel,
		PostEnqueueFunc: func(info *asynq.TaskInfo, err error) {
			if err != nil {
				e.missed.Store(true)
				e.log.Warn("periodic tick not enqueued", slog.Any("err", err))
			}
		},
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(TaskTick, e.handleTick)
	mux.HandleFunc(TaskAt, e.handleAt)
	if !e.cfg.DisableIngress {
		mux.HandleFunc(TaskSubmit, e.handleSubmit)
	}
	e.server = asynq.NewServer(e.cfg.Redis, asynq.Config{
		Concurrency:              e.cfg.Concurrency,
		Queues:                   map[string]int{e.cfg.Queue: 1},
		TaskCheckInterval:        e.cfg.PollInterval,
		DelayedTaskCheckInterval: e.cfg.PollInterval,
		ShutdownTimeout:          e.cfg.StopTimeout,
		Logger:                   alog,
		LogLevel:                 asynq.WarnLevel,
		RetryDelayFunc:           func(int, error, *asynq.Task) time.Duration { return retryDelay },
	})
	if err := e.sched.Start(); err != nil {
		return fmt.Errorf("scheduler: asynq scheduler: %w", err)
	}
	if err := e.server.Start(mux); err != nil {
		return fmt.Errorf("scheduler: asynq server: %w", err)
	}
	ready := make(chan struct{})
	e.loops.goLoop(func() {
		e.follow(lctx, ready, watcher{
			put:    func(s *Schedule) { e.register(lctx, s) },
			del:    e.unregister,
			synced: e.keepOnly,
		})
	})
	select {
	case <-ready:
	case <-sctx.Done():
		return fmt.Errorf("scheduler: loading schedules: %w", sctx.Err())
	}
	// A scheduler that was down missed its ticks: catch up once.
	e.catchUp(lctx)
	_ = e.rdb.SetNX(sctx, e.markerKey(), "1", 0).Err()
	e.loops.goLoop(func() { e.monitorRedis(lctx) })
	e.log.Info("scheduler started", slog.String("queue", e.cfg.Queue))
	return nil
}

// Stop unregisters nothing (schedules stay in the bucket); it stops the
// Scheduler, lets in-flight tasks finish (StopTimeout) and closes Redis.
// Stop before Start is harmless; a second Stop waits for the first.
func (e *Asynq) Stop(ctx context.Context) error { return e.life.Stop(ctx) }

func (e *Asynq) stop(context.Context) error {
	e.loops.cancelAll()
	e.mu.Lock()
	e.closing = true
	for _, en := range e.entries {
		if en.timer != nil {
			en.timer.Stop()
		}
	}
	e.mu.Unlock()
	if e.sched != nil {
		e.sched.Shutdown()
	}
	if e.server != nil {
		e.server.Shutdown()
	}
	if e.awaiter != nil {
		e.awaiter.Close() // after the ingress's handlers ended
	}
	if e.aclient != nil {
		_ = e.aclient.Close()
	}
	if e.inspector != nil {
		_ = e.inspector.Close()
	}
	if e.rdb != nil {
		_ = e.rdb.Close()
	}
	e.loops.wg.Wait()
	return nil
}

// Stopped is closed while the engine is not running: before Start, after a
// failed Start and once Stop has finished.
func (e *Asynq) Stopped() <-chan struct{} { return e.life.Stopped() }

// Create stores s and registers it at once.
func (e *Asynq) Create(ctx context.Context, s *Schedule) (*Schedule, error) {
	created, err := e.Client.Create(ctx, s)
	if err != nil {
		return nil, err
	}
	if e.life.Running() {
		e.register(ctx, created)
	}
	return created, nil
}

// keepOnly unregisters schedules deleted while the watch was down.
func (e *Asynq) keepOnly(ids map[string]bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id := range e.entries {
		if !ids[id] {
			e.dropLocked(id)
		}
	}
}

// Delete removes the schedule, its Scheduler entry and its delayed task.
func (e *Asynq) Delete(ctx context.Context, id string) error {
	if err := e.Client.Delete(ctx, id); err != nil {
		return err
	}
	e.unregister(id)
	return nil
}

func (e *Asynq) atTaskID(s *Schedule) string { return "toolq-" + s.JobID(s.At) }

// register makes s fire: an entry of asynq's Scheduler for a periodic
// schedule, a ProcessAt task for a delayed one.
func (e *Asynq) register(ctx context.Context, s *Schedule) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return
	}
	if old, ok := e.entries[s.ID]; ok {
		if old.s.CreatedAt.Equal(s.CreatedAt) && old.s.Spec() == s.Spec() {
			return
		}
		e.dropLocked(s.ID)
	}
	en := &entry{s: s}
	e.entries[s.ID] = en
	switch s.Kind() {
	case KindAt:
		e.enqueueAt(ctx, s)
	case KindCron:
		e.registerLocked(en)
	case KindEvery:
		// asynq's "@every d" ticks at (second of registration) + k*d:
		// register at a second on the schedule's grid, and tick that second
		// ourselves.
		now := time.Now()
		next := s.Next(now.Add(-time.Second))
		if next.Before(now) {
			next = s.Next(now)
		}
		en.timer = time.AfterFunc(time.Until(next)+20*time.Millisecond, func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.closing || e.entries[s.ID] != en {
				return
			}
			en.timer = nil
			e.registerLocked(en)
			e.enqueueTick(s.ID)
		})
	}
}

func (e *Asynq) registerLocked(en *entry) {
	task := asynq.NewTask(TaskTick, mustJSON(tickPayload{ID: en.s.ID}))
	id, err := e.sched.Register(en.s.asynqSpec(), task, asynq.Queue(e.cfg.Queue), asynq.MaxRetry(3), asynq.Timeout(time.Minute))
	if err != nil {
		e.log.Error("periodic schedule not registered", slog.String("id", en.s.ID), slog.Any("err", err))
		return
	}
	en.entryID = id
}

func (e *Asynq) enqueueTick(id string) {
	task := asynq.NewTask(TaskTick, mustJSON(tickPayload{ID: id}))
	if _, err := e.aclient.Enqueue(task, asynq.Queue(e.cfg.Queue), asynq.MaxRetry(3), asynq.Timeout(time.Minute)); err != nil {
		e.log.Warn("tick not enqueued", slog.String("id", id), slog.Any("err", err))
	}
}

// enqueueAt enqueues the delayed task of s. Its task id is derived from the
// fire time, so enqueueing it again (another instance, a Redis restart
// check) is refused by asynq while it exists.
func (e *Asynq) enqueueAt(ctx context.Context, s *Schedule) {
	task := asynq.NewTask(TaskAt, mustJSON(atPayload{ID: s.ID, At: s.At.Unix()}))
	_, err := e.aclient.EnqueueContext(ctx, task, asynq.ProcessAt(s.At), asynq.TaskID(e.atTaskID(s)),
		asynq.Queue(e.cfg.Queue), asynq.MaxRetry(25), asynq.Timeout(time.Minute), asynq.Retention(time.Hour))
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		e.log.Warn("delayed schedule not enqueued", slog.String("id", s.ID), slog.Any("err", err))
	}
}

// unregister stops firing schedule id.
func (e *Asynq) unregister(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dropLocked(id)
}

func (e *Asynq) dropLocked(id string) {
	en, ok := e.entries[id]
	if !ok {
		return
	}
	delete(e.entries, id)
	if en.timer != nil {
		en.timer.Stop()
	}
	if en.entryID != "" && e.sched != nil {
		_ = e.sched.Unregister(en.entryID)
	}
	if en.s.Kind() == KindAt && e.inspector != nil {
		_ = e.inspector.DeleteTask(e.cfg.Queue, e.atTaskID(en.s))
	}
}

// catchUp fires, once, the latest missed firing of every periodic schedule.
func (e *Asynq) catchUp(ctx context.Context) {
	e.mu.Lock()
	var due []*Schedule
	for _, en := range e.entries {
		if en.s.Kind() != KindAt {
			due = append(due, en.s)
		}
	}
	e.mu.Unlock()
	now := time.Now()
	for _, s := range due {
		t := s.Latest(now)
		if t.IsZero() {
			continue
		}
		fired, err := e.fire(ctx, s, t)
		if err != nil {
			e.log.Warn("catch-up firing failed", slog.String("id", s.ID), slog.Any("err", err))
		} else if fired {
			if e.cfg.Observer != nil {
				e.cfg.Observer.CaughtUp()
			}
			e.log.Info("missed firing caught up", slog.String("id", s.ID), slog.Time("fire_time", t))
		}
	}
}

// monitorRedis notices a Redis that was unreachable, or lost a tick, or
// lost its data (the marker key is gone): once Redis answers again, delayed
// tasks are enqueued again (deduplicated by task id) and periodic schedules
// caught up once. asynq's Scheduler keeps its entries in memory, so ticks
// resume by themselves once Redis answers; the ones it missed meanwhile
// are not made up by asynq.
func (e *Asynq) monitorRedis(ctx context.Context) {
	t := time.NewTicker(e.cfg.RedisCheckInterval)
	defer t.Stop()
	var down time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, e.cfg.RedisCheckInterval)
		n, err := e.rdb.Exists(cctx, e.markerKey()).Result()
		switch {
		case err != nil:
			if down.IsZero() {
				down = time.Now()
				e.log.Warn("redis unreachable", slog.Any("err", err))
			}
		case n == 0:
			e.log.Warn("redis lost its data; registering schedules again")
			e.reregister(ctx, cctx)
			down = time.Time{}
		case !down.IsZero():
			e.log.Warn("redis answers again; catching up missed firings", slog.Duration("outage", time.Since(down)))
			e.reregister(ctx, cctx)
			down = time.Time{}
		case e.missed.Load():
			e.log.Warn("a tick was not enqueued; catching up missed firings")
			e.reregister(ctx, cctx)
		}
		cancel()
	}
}

// reregister enqueues delayed schedules again and catches periodic ones up.
func (e *Asynq) reregister(ctx, cctx context.Context) {
	e.missed.Store(false)
	e.mu.Lock()
	var ats []*Schedule
	for _, en := range e.entries {
		if en.s.Kind() == KindAt {
			ats = append(ats, en.s)
		}
	}
	e.mu.Unlock()
	for _, s := range ats {
		e.enqueueAt(cctx, s)
	}
	e.catchUp(ctx)
	_ = e.rdb.Set(cctx, e.markerKey(), "1", 0).Err()
}

func (e *Asynq) handleTick(ctx context.Context, t *asynq.Task) error {
	var p tickPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil || !contracts.ValidID(p.ID) {
		return fmt.Errorf("malformed tick: %w", asynq.SkipRetry)
	}
	s, err := e.load(ctx, p.ID)
	if errors.Is(err, ErrNotFound) {
		return nil // deleted
	}
	if err != nil {
		return err
	}
	ft := s.Latest(time.Now())
	if ft.IsZero() {
		return nil
	}
	_, err = e.fire(ctx, s, ft)
	return err
}

func (e *Asynq) handleAt(ctx context.Context, t *asynq.Task) error {
	var p atPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil || !contracts.ValidID(p.ID) {
		return fmt.Errorf("malformed delayed task: %w", asynq.SkipRetry)
	}
	s, err := e.load(ctx, p.ID)
	if errors.Is(err, ErrNotFound) {
		return nil // deleted, or fired by another instance
	}
	if err != nil {
		return err
	}
	if s.Kind() != KindAt || s.At.Unix() != p.At {
		return nil // a task of an earlier schedule with this id
	}
	_, err = e.fire(ctx, s, s.At)
	return err
}

// handleSubmit is the ingress: the task's payload becomes a toolq job; the
// task waits for its terminal event and keeps it as its result.
func (e *Asynq) handleSubmit(ctx context.Context, t *asynq.Task) error {
	var p SubmitPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("toolq:submit payload: %w: %w", err, asynq.SkipRetry)
	}
	if p.ID == "" {
		tid, _ := asynq.GetTaskID(ctx)
		p.ID = "asynq-" + tid
	}
	if p.Session == "" {
		p.Session = producer.DefaultSession
	}
	job := &contracts.Job{
		ID: p.ID, Tool: p.Tool, Session: p.Session, Input: p.Input, TimeoutMs: p.TimeoutMs,
		MaxAttempts: p.MaxAttempts, Meta: p.Meta, CreatedAt: time.Now().UTC(),
	}
	// A duplicate is this task's earlier attempt: go on to await it.
	if err := e.prod.SubmitJob(ctx, job, ""); err != nil && !errors.Is(err, producer.ErrDuplicate) {
		if errors.Is(err, contracts.ErrInvalidInput) {
			return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
		}
		return err
	}
	if p.NoWait {
		_, _ = t.ResultWriter().Write(mustJSON(job))
		return nil
	}
	ev, err := e.awaiter.Await(ctx, job.Session, job.ID, nil)
	if err != nil {
		return fmt.Errorf("awaiting job %s: %w", job.ID, err)
	}
	if _, err := t.ResultWriter().Write(mustJSON(ev)); err != nil {
		e.log.Warn("ingress result not stored", slog.String("job", job.ID), slog.Any("err", err))
	}
	if ev.Data.Status != contracts.StatusCompleted {
		return fmt.Errorf("toolq job %s %s: %w", job.ID, ev.Data.Status, asynq.SkipRetry)
	}
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// asynqLogger sends asynq's logs to slog.
type asynqLogger struct{ log *slog.Logger }

func (l *asynqLogger) Debug(args ...any) { l.log.Debug(fmt.Sprint(args...)) }
func (l *asynqLogger) Info(args ...any)  { l.log.Info(fmt.Sprint(args...)) }
func (l *asynqLogger) Warn(args ...any)  { l.log.Warn(fmt.Sprint(args...)) }
func (l *asynqLogger) Error(args ...any) { l.log.Error(fmt.Sprint(args...)) }

// Fatal logs at error level; the engine, not asynq, decides to exit.
func (l *asynqLogger) Fatal(args ...any) { l.log.Error(fmt.Sprint(args...)) }
