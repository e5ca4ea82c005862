package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

// DefaultSession is the session of jobs submitted without one.
const DefaultSession = "default"

// Config configures a Producer. The zero value is usable.
type Config struct {
	// Subjects names the streams and subjects; prefix "toolq" by default.
	Subjects contracts.Subjects
	// Session is used when a submit names none; DefaultSession by default.
	Session string
	// Timeout bounds calls whose context has no deadline; 10 s by default.
	Timeout time.Duration
	// Name identifies this producer as the source of events it writes
	// (cancellations); random by default.
	Name string
	// Logger receives structured logs; slog.Default() when nil.
	Logger *slog.Logger
}

// Errors.
var (
	// ErrFinished is returned by Cancel for a job that already ended.
	ErrFinished = errors.New("producer: job already ended")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("producer: closed")
)

// Producer submits jobs and follows their events. It is safe for concurrent
// use. One ordered consumer per session followed serves every Await of that
// session.
type Producer struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	cfg    Config
	log    *slog.Logger
	source string

	initOnce sync.Once
	initErr  error
	events   *bus.Events
	cancels  jetstream.KeyValue

	mu        sync.Mutex
	closed    bool
	followers map[string]*follower
}

// New returns a producer on connection nc. The streams must exist (a worker
// or `toolq dev` creates them); New does not touch the server.
func New(nc *nats.Conn, cfg *Config) (*Producer, error) {
	if nc == nil {
		return nil, errors.New("producer: nil connection")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Session == "" {
		c.Session = DefaultSession
	}
	if err := contracts.ValidateID("session", c.Session); err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Timeout < 0 {
		return nil, errors.New("producer: negative timeout")
	}
	if c.Name == "" {
		c.Name = nuid.Next()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(c.Timeout))
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	return &Producer{
		nc: nc, js: js, cfg: c, log: c.Logger, source: "/toolq/producer/" + c.Name,
		followers: map[string]*follower{},
	}, nil
}

func (p *Producer) init(ctx context.Context) error {
	p.initOnce.Do(func() {
		p.events, p.initErr = bus.NewEvents(ctx, p.js, p.cfg.Subjects)
		if p.initErr != nil {
			return
		}
		p.cancels, p.initErr = p.js.KeyValue(ctx, p.cfg.Subjects.Bucket("cancels"))
		if p.initErr != nil {
			p.initErr = fmt.Errorf("producer: cancels bucket: %w", p.initErr)
		}
	})
	if p.initErr != nil {
		// Let a later call try again (the streams may not exist yet).
		err := p.initErr
		p.initOnce = sync.Once{}
		return err
	}
	return nil
}

func (p *Producer) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, p.cfg.Timeout)
}

// SubmitOpts are the optional fields of a submitted job.
type SubmitOpts struct {
	// ID of the job; random when empty. Submitting the same id twice within
	// the duplicate window enqueues the job once.
	ID string
	// Session of the job; the producer's session when empty.
	Session string
	// TimeoutMs, MaxAttempts, Progress and Meta are copied to the job.
	TimeoutMs   int64
	MaxAttempts int
	Progress    bool
	Meta        map[string]string
	// Parent links a nested call to its code-mode run.
	Parent *contracts.Parent
	// TraceParent is a W3C traceparent carried in the job's headers.
	TraceParent string
}

// Submit enqueues a job for tool with input (any JSON value; empty means
// none). It returns the job as enqueued.
func (p *Producer) Submit(ctx context.Context, tool string, input json.RawMessage, opts *SubmitOpts) (*contracts.Job, error) {
	var o SubmitOpts
	if opts != nil {
		o = *opts
	}
	job := &contracts.Job{
		ID: o.ID, Tool: tool, Session: o.Session, Input: input, Parent: o.Parent,
		TimeoutMs: o.TimeoutMs, MaxAttempts: o.MaxAttempts, Progress: o.Progress, Meta: o.Meta,
		CreatedAt: time.Now().UTC(),
	}
	if job.ID == "" {
		job.ID = nuid.Next()
	}
	if job.Session == "" {
		job.Session = p.cfg.Session
	}
	return job, p.SubmitJob(ctx, job, o.TraceParent)
}

// SubmitJob enqueues a fully built job, after validating it.
func (p *Producer) SubmitJob(ctx context.Context, job *contracts.Job, traceparent string) error {
	if err := job.Validate(); err != nil {
		return err
	}
	if len(job.Input) > 0 && !json.Valid(job.Input) {
		return contracts.Errorf(contracts.CodeInvalidInput, "input is not valid JSON")
	}
	data, err := json.Marshal(job)
	if err != nil {
		return contracts.Errorf(contracts.CodeInvalidInput, "job cannot be encoded: %v", err)
	}
	msg := &nats.Msg{Subject: p.cfg.Subjects.Job(job.Tool), Data: data}
	if traceparent != "" {
		msg.Header = nats.Header{bus.HeaderTraceParent: []string{traceparent}}
	}
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	if _, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(job.ID)); err != nil {
		return fmt.Errorf("producer: submit %s: %w", job.ID, err)
	}
	return nil
}

// AwaitOpts are the optional knobs of Await.
type AwaitOpts struct {
	// Parked also returns on a parked status (waiting, approval_pending),
	// not only on a terminal one.
	Parked bool
}

func (o *AwaitOpts) match(s contracts.Status) bool {
	return s.Terminal() || (o != nil && o.Parked && s.Parked())
}

// Await returns the terminal event of a job (or, with Parked, the first
// parked one). It works whether the event was published before or after the
// call. It waits until ctx ends; it applies no default timeout.
func (p *Producer) Await(ctx context.Context, session, jobID string, opts *AwaitOpts) (*contracts.Event, error) {
	if err := contracts.ValidateID("session", session); err != nil {
		return nil, err
	}
	if err := contracts.ValidateID("job id", jobID); err != nil {
		return nil, err
	}
	lctx, cancel := p.withTimeout(ctx)
	err := p.init(lctx)
	cancel()
	if err != nil {
		return nil, err
	}
	w := &waiter{ch: make(chan *contracts.Event, 1), opts: opts}
	f, err := p.follow(ctx, session)
	if err != nil {
		return nil, err
	}
	f.add(jobID, w)
	defer f.remove(jobID, w)
	// The follower is subscribed now; anything older is in the stream.
	lctx, cancel = p.withTimeout(ctx)
	ev, _, err := p.events.Last(lctx, session, jobID)
	cancel()
	if err != nil {
		return nil, err
	}
	if ev != nil && opts.match(ev.Data.Status) {
		return ev, nil
	}
	select {
	case ev := <-w.ch:
		return ev, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Cancel cancels a job: a queued job never starts, a running job's context is
// cancelled; either way the job's terminal event is `cancelled`. It returns
// ErrFinished when the job had already ended.
func (p *Producer) Cancel(ctx context.Context, session, jobID string) error {
	if err := contracts.ValidateID("session", session); err != nil {
		return err
	}
	if err := contracts.ValidateID("job id", jobID); err != nil {
		return err
	}
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	if err := p.init(ctx); err != nil {
		return err
	}
	// 1. A durable mark: whichever worker pulls the job later skips it.
	if _, err := p.cancels.Put(ctx, jobID, []byte(session)); err != nil {
		return fmt.Errorf("producer: cancel %s: %w", jobID, err)
	}
	// 2. Tell running workers at once.
	if err := p.nc.Publish(p.cfg.Subjects.Cancel(jobID), nil); err != nil {
		return fmt.Errorf("producer: cancel %s: %w", jobID, err)
	}
	// 3. End the job, unless it already ended.
	for range 10 {
		last, seq, err := p.events.Last(ctx, session, jobID)
		if err != nil {
			return err
		}
		if last != nil && last.Data.Status.Terminal() {
			if last.Data.Status == contracts.StatusCancelled {
				return nil
			}
			return fmt.Errorf("%w: %s", ErrFinished, last.Data.Status)
		}
		job := &contracts.Job{ID: jobID, Session: session}
		if last != nil {
			job.Tool, job.Parent, job.Meta = last.Data.Tool, last.Data.Parent, last.Data.Meta
		}
		ev := contracts.NewEvent(p.source, job, contracts.StatusCancelled, 1, time.Now())
		ev.Data.Error = contracts.Errorf(contracts.CodeCancelled, "cancelled by request")
		_, err = p.events.Publish(ctx, ev, seq, "")
		if errors.Is(err, bus.ErrConflict) {
			continue
		}
		return err
	}
	return fmt.Errorf("producer: cancel %s: event subject kept moving", jobID)
}

// Close stops following every session. Pending Awaits end with their contexts.
func (p *Producer) Close() {
	p.mu.Lock()
	fs := p.followers
	p.followers = map[string]*follower{}
	p.closed = true
	p.mu.Unlock()
	for _, f := range fs {
		f.stop()
	}
}
