package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/producer"
)

// Scheduler is what every engine offers: schedules kept in the NATS KV
// bucket <prefix>_schedules, and a lifecycle that turns their firings into
// jobs. Create, Get, List and Delete work before Start (they only touch the
// bucket); a running engine of any instance picks changes up at once.
type Scheduler interface {
	// Create validates s, stores it and returns it as stored (ID, At,
	// CreatedAt and Anchor filled in). Bad input is a *contracts.Error with
	// code invalid_input; a taken id is ErrExists.
	Create(ctx context.Context, s *Schedule) (*Schedule, error)
	// Get returns one schedule, or ErrNotFound.
	Get(ctx context.Context, id string) (*Info, error)
	// List returns every schedule, ordered by id.
	List(ctx context.Context) ([]*Info, error)
	// Delete removes a schedule; it never fires after Delete returns. A
	// missing id is ErrNotFound.
	Delete(ctx context.Context, id string) error
	// Pause stops a periodic schedule's firings until Resume: a firing
	// that comes due while it is paused is skipped, never caught up later.
	// A one-shot schedule (at, in) does not pause: remove it instead.
	Pause(ctx context.Context, id string) error
	// Resume lets a paused schedule fire again from its next fire time.
	Resume(ctx context.Context, id string) error

	// Start runs the engine until Stop. A failed Start leaves nothing
	// running; Start may be called again after it, or after Stop.
	Start(ctx context.Context) error
	// Stop stops firing, lets in-flight firings finish until ctx ends and
	// returns. Stop before Start is harmless; a second Stop waits for the
	// first to finish.
	Stop(ctx context.Context) error
	// Stopped is closed while the engine is not running: before Start,
	// after a failed Start, and once Stop has finished.
	Stopped() <-chan struct{}
}

// Info is a stored schedule with its next and last fire times.
type Info struct {
	Schedule *Schedule `json:"schedule"`
	// Next is the next fire time as computed from the schedule (for the
	// NATS engine's every schedules the server's own phase may differ by
	// less than a second).
	Next time.Time `json:"next,omitzero"`
	// LastFire is the fire time of the last job enqueued, if any.
	LastFire time.Time `json:"last_fire,omitzero"`
	// Paused says firings are skipped until Resume.
	Paused bool `json:"paused,omitempty"`
}

// ClientConfig configures a Client. The zero value is usable.
type ClientConfig struct {
	// Subjects names the streams and buckets; prefix "toolq" by default.
	Subjects contracts.Subjects
	// Replicas of the schedules bucket when Client creates it; 1 by default.
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

// Tracer starts the span of a firing. The job it enqueues carries the
// span's traceparent, so a fired job's trace begins at its firing. The
// scheduler names no tracing library: package tracing implements Tracer.
type Tracer interface {
	// Firing starts the span of schedule id firing a job of tool, due at
	// due; end ends it with the error code of a failed enqueue ("" when
	// it was enqueued).
	Firing(id, tool string, due time.Time) (traceparent string, end func(code contracts.ErrorCode))
}

// Observer receives a scheduler's figures. Its methods must be safe to
// call at once and must not block.
type Observer interface {
	// Fired: a firing was enqueued as a job, late after its fire time.
	Fired(late time.Duration)
	// CaughtUp: a missed firing was made up once (the store came back).
	CaughtUp()
	// FireFailed: a firing could not be enqueued this time; it is retried.
	FireFailed()
}

func (c *ClientConfig) withDefaults() (ClientConfig, error) {
	var out ClientConfig
	if c != nil {
		out = *c
	}
	if out.Replicas == 0 {
		out.Replicas = 1
	}
	if out.Replicas < 1 || out.Replicas > 5 {
		return out, fmt.Errorf("scheduler: replicas %d out of range [1, 5]", out.Replicas)
	}
	if out.Timeout == 0 {
		out.Timeout = 10 * time.Second
	}
	if out.Timeout < 0 {
		return out, errors.New("scheduler: negative timeout")
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out, nil
}

// Client creates, lists and deletes schedules in the KV bucket, and fires
// them for the engines. It needs no running engine: `toolq schedule add`
// uses it alone. It is safe for concurrent use.
type Client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	cfg  ClientConfig
	log  *slog.Logger
	prod *producer.Producer
	now  func() time.Time

	mu sync.Mutex
	kv jetstream.KeyValue
}

// NewClient returns a client on connection nc. It does not touch the server.
func NewClient(nc *nats.Conn, cfg *ClientConfig) (*Client, error) {
	if nc == nil {
		return nil, errors.New("scheduler: nil connection")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(c.Timeout))
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	// A firing has no caller to refuse: a job for a tool nobody serves is
	// queued and ended by the workers' queue-time limit, with an event.
	prod, err := producer.New(nc, &producer.Config{Subjects: c.Subjects, Timeout: c.Timeout, Logger: c.Logger, Name: "scheduler", SubmitUnserved: true})
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	return &Client{nc: nc, js: js, cfg: c, log: c.Logger, prod: prod, now: time.Now}, nil
}

// Bucket is the name of the schedules bucket.
func (c *Client) Bucket() string { return c.cfg.Subjects.SchedulesBucket() }

func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.cfg.Timeout)
}

// bucket returns the schedules bucket, creating it on first use.
func (c *Client) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kv != nil {
		return c.kv, nil
	}
	kc := jetstream.KeyValueConfig{
		Bucket:      c.Bucket(),
		Description: "toolq schedules: def.<id> is a schedule, fired.<id> its last fire time",
		History:     1,
		MaxBytes:    bus.Config{Subjects: c.cfg.Subjects}.MaxBytesOf(c.cfg.Subjects.SchedulesBucket()),
		Storage:     jetstream.FileStorage,
		Replicas:    c.cfg.Replicas,
	}
	kv, err := c.js.KeyValue(ctx, kc.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = c.js.CreateKeyValue(ctx, kc)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = c.js.KeyValue(ctx, kc.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("scheduler: bucket %s: %w", kc.Bucket, err)
	}
	c.kv = kv
	return kv, nil
}

func defKey(id string) string    { return "def." + id }
func firedKey(id string) string  { return "fired." + id }
func pausedKey(id string) string { return "paused." + id }

// Create validates s, stores it and returns the stored copy.
func (c *Client) Create(ctx context.Context, s *Schedule) (*Schedule, error) {
	if s == nil {
		return nil, invalid("nil schedule")
	}
	cp := *s
	if err := cp.prepare(c.now()); err != nil {
		return nil, err
	}
	data, err := json.Marshal(&cp)
	if err != nil {
		return nil, invalid("schedule cannot be encoded: %v", err)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	kv, err := c.bucket(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := kv.Create(ctx, defKey(cp.ID), data); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("%w: %s", ErrExists, cp.ID)
		}
		return nil, fmt.Errorf("scheduler: create %s: %w", cp.ID, err)
	}
	// A leftover fire time or pause of an earlier schedule with this id
	// must not suppress the new one's firings.
	_ = kv.Purge(ctx, firedKey(cp.ID))
	_ = kv.Purge(ctx, pausedKey(cp.ID))
	c.log.Info("schedule created", slog.String("id", cp.ID), slog.String("spec", cp.Spec()), slog.String("tool", cp.Job.Tool))
	return &cp, nil
}

// Get returns the schedule id.
func (c *Client) Get(ctx context.Context, id string) (*Info, error) {
	if err := contracts.ValidateID("schedule id", id); err != nil {
		return nil, err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	s, err := c.load(ctx, id)
	if err != nil {
		return nil, err
	}
	last, _, err := c.lastFire(ctx, id)
	if err != nil {
		return nil, err
	}
	paused, err := c.paused(ctx, id)
	if err != nil {
		return nil, err
	}
	return c.info(s, last, paused), nil
}

func (c *Client) info(s *Schedule, last time.Time, paused bool) *Info {
	in := &Info{Schedule: s, LastFire: last, Paused: paused}
	if !paused {
		in.Next = s.Next(c.now())
	}
	return in
}

// List returns every schedule, ordered by id.
func (c *Client) List(ctx context.Context) ([]*Info, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	kv, err := c.bucket(ctx)
	if err != nil {
		return nil, err
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("scheduler: list: %w", err)
	}
	var ids []string
	for k := range lister.Keys() {
		if id, ok := strings.CutPrefix(k, "def."); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	out := make([]*Info, 0, len(ids))
	for _, id := range ids {
		s, err := c.load(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		last, _, err := c.lastFire(ctx, id)
		if err != nil {
			return nil, err
		}
		paused, err := c.paused(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, c.info(s, last, paused))
	}
	return out, nil
}

// Delete removes schedule id; engines stop firing it.
func (c *Client) Delete(ctx context.Context, id string) error {
	if err := contracts.ValidateID("schedule id", id); err != nil {
		return err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	kv, err := c.bucket(ctx)
	if err != nil {
		return err
	}
	if _, err := kv.Get(ctx, defKey(id)); err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return fmt.Errorf("scheduler: delete %s: %w", id, err)
	}
	if err := kv.Delete(ctx, defKey(id)); err != nil {
		return fmt.Errorf("scheduler: delete %s: %w", id, err)
	}
	_ = kv.Purge(ctx, firedKey(id))
	_ = kv.Purge(ctx, pausedKey(id))
	c.log.Info("schedule deleted", slog.String("id", id))
	return nil
}

// Pause stops schedule id's firings until Resume. It marks the schedule
// under its own key, which the engines do not watch: they go on ticking,
// and each firing that comes due finds the mark and is skipped (recorded
// as fired, so that neither a resume nor a restart catches it up). A
// one-shot schedule is refused: it would be lost at its fire time.
func (c *Client) Pause(ctx context.Context, id string) error {
	return c.setPaused(ctx, id, true)
}

// Resume lets a paused schedule fire again from its next fire time;
// resuming one that is not paused does nothing.
func (c *Client) Resume(ctx context.Context, id string) error {
	return c.setPaused(ctx, id, false)
}

func (c *Client) setPaused(ctx context.Context, id string, paused bool) error {
	if err := contracts.ValidateID("schedule id", id); err != nil {
		return err
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	s, err := c.load(ctx, id)
	if err != nil {
		return err
	}
	kv, err := c.bucket(ctx)
	if err != nil {
		return err
	}
	if !paused {
		if err := kv.Purge(ctx, pausedKey(id)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("scheduler: resume %s: %w", id, err)
		}
		c.log.Info("schedule resumed", slog.String("id", id))
		return nil
	}
	if k := s.Kind(); k == KindAt {
		return invalid("schedule %s fires once: a one-shot schedule does not pause (remove it instead)", id)
	}
	if _, err := kv.Put(ctx, pausedKey(id), []byte(strconv.FormatInt(c.now().Unix(), 10))); err != nil {
		return fmt.Errorf("scheduler: pause %s: %w", id, err)
	}
	c.log.Info("schedule paused", slog.String("id", id))
	return nil
}

// paused reports whether schedule id is paused.
func (c *Client) paused(ctx context.Context, id string) (bool, error) {
	kv, err := c.bucket(ctx)
	if err != nil {
		return false, err
	}
	_, err = kv.Get(ctx, pausedKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("scheduler: paused %s: %w", id, err)
	}
	return true, nil
}

// load reads the definition of id.
func (c *Client) load(ctx context.Context, id string) (*Schedule, error) {
	kv, err := c.bucket(ctx)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, defKey(id))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return nil, fmt.Errorf("scheduler: load %s: %w", id, err)
	}
	return decodeSchedule(e.Value())
}

func decodeSchedule(data []byte) (*Schedule, error) {
	var s Schedule
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("scheduler: stored schedule is malformed: %w", err)
	}
	if s.Kind() == "" || !contracts.ValidID(s.ID) {
		return nil, fmt.Errorf("scheduler: stored schedule %q is malformed", s.ID)
	}
	return &s, nil
}

// lastFire returns the last fire time of id and the revision of its key
// (0 when it has none).
func (c *Client) lastFire(ctx context.Context, id string) (time.Time, uint64, error) {
	kv, err := c.bucket(ctx)
	if err != nil {
		return time.Time{}, 0, err
	}
	e, err := kv.Get(ctx, firedKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return time.Time{}, 0, nil
	}
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("scheduler: last fire of %s: %w", id, err)
	}
	sec, err := strconv.ParseInt(string(e.Value()), 10, 64)
	if err != nil {
		return time.Time{}, e.Revision(), nil
	}
	return time.Unix(sec, 0).UTC(), e.Revision(), nil
}

// fire enqueues the job of s's firing at t, unless a firing at or after t
// was already enqueued. The job id (and Nats-Msg-Id) is s.JobID(t), so
// concurrent firings of the same time by several schedulers enqueue once.
// A one-shot schedule is deleted once its job is enqueued.
func (c *Client) fire(ctx context.Context, s *Schedule, t time.Time) (bool, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	t = t.Truncate(time.Second)
	last, _, err := c.lastFire(ctx, s.ID)
	if err != nil {
		return false, err
	}
	if !last.IsZero() && !t.After(last) {
		return false, nil
	}
	if s.Kind() != KindAt {
		paused, err := c.paused(ctx, s.ID)
		if err != nil {
			return false, err
		}
		if paused {
			// Skipped, and recorded as fired: a resume goes on from the
			// next fire time instead of catching this one up.
			c.log.Debug("paused schedule skipped", slog.String("id", s.ID), slog.Time("fire_time", t))
			return false, c.markFired(ctx, s.ID, t)
		}
	}
	job := s.Job.build(s.ID, t)
	var tp string
	end := func(contracts.ErrorCode) {}
	if c.cfg.Tracer != nil {
		tp, end = c.cfg.Tracer.Firing(s.ID, job.Tool, t)
	}
	// A duplicate is this firing enqueued by another scheduler instance.
	if err := c.prod.SubmitJob(ctx, job, tp); err != nil && !errors.Is(err, producer.ErrDuplicate) {
		end(contracts.AsError(err).Code)
		if c.cfg.Observer != nil {
			c.cfg.Observer.FireFailed()
		}
		return false, err
	}
	end("")
	if err := c.markFired(ctx, s.ID, t); err != nil {
		return true, err
	}
	if s.Kind() == KindAt {
		kv, err := c.bucket(ctx)
		if err != nil {
			return true, err
		}
		if err := kv.Delete(ctx, defKey(s.ID)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return true, fmt.Errorf("scheduler: delete fired %s: %w", s.ID, err)
		}
		_ = kv.Purge(ctx, firedKey(s.ID))
	}
	if c.cfg.Observer != nil {
		c.cfg.Observer.Fired(max(c.now().Sub(t), 0))
	}
	c.log.Debug("schedule fired", slog.String("id", s.ID), slog.String("job", job.ID))
	return true, nil
}

// markFired raises the last fire time of id to t (optimistic concurrency:
// two schedulers firing at once never lower it).
func (c *Client) markFired(ctx context.Context, id string, t time.Time) error {
	kv, err := c.bucket(ctx)
	if err != nil {
		return err
	}
	val := []byte(strconv.FormatInt(t.Unix(), 10))
	for range 5 {
		last, rev, err := c.lastFire(ctx, id)
		if err != nil {
			return err
		}
		if !last.IsZero() && !t.After(last) {
			return nil
		}
		if rev == 0 {
			_, err = kv.Create(ctx, firedKey(id), val)
		} else {
			_, err = kv.Update(ctx, firedKey(id), val, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSeq(err) {
			return fmt.Errorf("scheduler: mark %s fired: %w", id, err)
		}
	}
	return nil
}

func isWrongSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// watcher receives the schedules of the bucket as they change.
type watcher struct {
	// put is called for every stored schedule and every later put.
	put func(*Schedule)
	// del is called for every deletion.
	del func(id string)
	// synced is called once the stored schedules have been passed to put,
	// with their ids (after a re-watch, anything else was deleted meanwhile).
	synced func(ids map[string]bool)
}

// follow runs w until ctx ends, watching again (after a second) whenever a
// watch ends early. ready is closed after the first sync.
func (c *Client) follow(ctx context.Context, ready chan<- struct{}, w watcher) {
	first := true
	synced := w.synced
	w.synced = func(ids map[string]bool) {
		if synced != nil {
			synced(ids)
		}
		if first {
			first = false
			close(ready)
		}
	}
	for {
		err := c.watch(ctx, w)
		if ctx.Err() != nil {
			return
		}
		c.log.Warn("schedule watch ended; watching again", slog.Any("err", err))
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// watch passes the bucket's schedules to w until ctx ends or the watch does.
func (c *Client) watch(ctx context.Context, w watcher) error {
	kv, err := c.bucket(ctx)
	if err != nil {
		return err
	}
	kw, err := kv.Watch(ctx, "def.*")
	if err != nil {
		return fmt.Errorf("scheduler: watch: %w", err)
	}
	defer func() { _ = kw.Stop() }()
	seen := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-kw.Updates():
			if !ok {
				return errors.New("scheduler: watch closed")
			}
			if e == nil {
				if seen != nil {
					w.synced(seen)
					seen = nil
				}
				continue
			}
			id := strings.TrimPrefix(e.Key(), "def.")
			if e.Operation() != jetstream.KeyValuePut {
				w.del(id)
				continue
			}
			s, err := decodeSchedule(e.Value())
			if err != nil {
				c.log.Warn("skipping malformed schedule", slog.String("key", e.Key()), slog.Any("err", err))
				continue
			}
			if seen != nil {
				seen[id] = true
			}
			w.put(s)
		}
	}
}
