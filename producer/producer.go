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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

// DefaultSession is the session of jobs submitted without one.
const DefaultSession = "default"

// DefaultAwaitTimeout bounds an Await whose context has no deadline, unless
// Config.AwaitTimeout says otherwise. It matches the default timeout of an
// exec job (1800 s).
const DefaultAwaitTimeout = 30 * time.Minute

// Config configures a Producer. The zero value is usable.
type Config struct {
	// Subjects names the streams and subjects; prefix "toolq" by default.
	Subjects contracts.Subjects
	// Session is used when a submit names none; DefaultSession by default.
	Session string
	// Timeout bounds calls whose context has no deadline; 10 s by default.
	// It bounds each request to the server, not the wait for a job.
	Timeout time.Duration
	// AwaitTimeout bounds an Await (and AwaitCodeMode) whose context has no
	// deadline: a job that never ends cannot hold the caller forever.
	// DefaultAwaitTimeout when zero. A context with a deadline is used as
	// it is, longer or shorter.
	AwaitTimeout time.Duration
	// Name identifies this producer as the source of events it writes
	// (cancellations); random by default.
	Name string
	// Logger receives structured logs; slog.Default() when nil.
	Logger *slog.Logger
	// TenantAccount says the connection is a tenant account's
	// (deploy/nats/tenants.conf): the streams are out of its reach, and
	// only its own subspace of the bus is imported. The producer then
	// follows events by subscription, reads a job's last event by direct
	// get, and cancels through the imported cancel subjects, leaving the
	// cancelled event to the worker. ReadEvents asks a worker serving
	// tenants to replay the stored events, in pages of 10,000.
	//
	// A tenant's producer cannot see the jobs streams, so it does not check
	// that a tool is served (SubmitUnserved): a job for a tool nobody
	// serves is queued, and ended by the workers' queue-time limit.
	TenantAccount bool
	// SubmitUnserved submits jobs for tools no worker has ever served,
	// without asking. By default a submit first checks that the jobs
	// stream holds the tool's consumer (which the first worker of a tool
	// makes and which outlives its workers) and refuses the job with
	// ErrToolNotServed otherwise; a tool found served is remembered for
	// ServedTTL, so the check costs one request per tool per ServedTTL.
	SubmitUnserved bool
	// ServedTTL is how long a tool found served is remembered; one minute
	// by default.
	ServedTTL time.Duration
	// FollowHeartbeat is the idle heartbeat a session's follower (Await's,
	// and ReadEvents with Follow) asks of its consumer; after two missed
	// ones the follower makes its consumer again from the event after the
	// last it passed on, so it comes back soon after the consumer's server
	// dies. DefaultFollowHeartbeat (1 s) when zero; at least 100 ms.
	FollowHeartbeat time.Duration
	// TenantFollowPending is how many live events a following ReadEvents
	// on a tenant account holds while its callback is behind; when more
	// arrive, the read asks for a replay and passes the events it missed,
	// late but not lost. DefaultTenantFollowPending when zero.
	TenantFollowPending int
}

// DefaultTenantFollowPending is Config.TenantFollowPending when zero.
const DefaultTenantFollowPending = 64 * 1024

// Producer submits jobs and follows their events. It is safe for concurrent
// use. One consumer per session followed serves every Await of that
// session.
type Producer struct {
	// catalogSeq is the catalog bucket's sequence of this producer's last
	// RegisterClientTool, sent with its code-mode jobs.
	catalogSeq atomic.Uint64
	nc         *nats.Conn
	js         jetstream.JetStream
	cfg        Config
	log        *slog.Logger
	source     string

	initMu  sync.Mutex
	ready   bool
	events  *bus.Events
	cancels jetstream.KeyValue

	mu        sync.Mutex
	closed    bool
	followers map[string]*follower

	servedMu sync.Mutex
	served   map[string]servedEntry // a tool's level consumer → until when it counts as served

	// hooks stop Await at its steps in internal tests; nil otherwise.
	hooks *awaitHooks
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
	if c.AwaitTimeout == 0 {
		c.AwaitTimeout = DefaultAwaitTimeout
	}
	if c.AwaitTimeout < 0 {
		return nil, errors.New("producer: negative await timeout")
	}
	if c.ServedTTL == 0 {
		c.ServedTTL = time.Minute
	}
	if c.ServedTTL < 0 {
		return nil, errors.New("producer: negative served TTL")
	}
	if c.FollowHeartbeat == 0 {
		c.FollowHeartbeat = DefaultFollowHeartbeat
	}
	if c.FollowHeartbeat < 100*time.Millisecond {
		return nil, errors.New("producer: follow heartbeat below 100ms")
	}
	if c.TenantFollowPending == 0 {
		c.TenantFollowPending = DefaultTenantFollowPending
	}
	if c.TenantFollowPending < 0 {
		return nil, errors.New("producer: negative tenant follow pending")
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
		followers: map[string]*follower{}, served: map[string]servedEntry{},
	}, nil
}

func (p *Producer) init(ctx context.Context) error {
	p.initMu.Lock()
	defer p.initMu.Unlock()
	if p.ready {
		return nil
	}
	if p.cfg.TenantAccount {
		p.events, p.ready = bus.NewImportedEvents(p.nc, p.cfg.Subjects), true
		return nil
	}
	// A failure is not remembered: the streams may not exist yet, or the
	// cluster may be electing a leader; the next call tries again.
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	events, err := bus.NewEvents(ctx, p.js, p.cfg.Subjects)
	if err != nil {
		return err
	}
	cancels, err := p.js.KeyValue(ctx, p.cfg.Subjects.CancelsBucket())
	if err != nil {
		return fmt.Errorf("producer: cancels bucket: %w", err)
	}
	p.events, p.cancels, p.ready = events, cancels, true
	return nil
}

// withTimeout bounds one request to the server by the configured Timeout
// (and by ctx): a request made while a cluster elects a leader gets no
// answer, and must not wait for the caller's whole deadline.
func (p *Producer) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.cfg.Timeout)
}

// SubmitOpts are the optional fields of a submitted job.
type SubmitOpts struct {
	// ID of the job; random when empty. Submitting the same id twice within
	// the duplicate window enqueues the job once.
	ID string
	// Submitting an id the bus already holds returns ErrDuplicate (with the
	// job), since only the earlier job runs.
	//
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
	// Priority is the job's level (high, normal, low); "" is normal.
	Priority contracts.Priority
	// Concurrency caps the jobs of its key that run at once.
	Concurrency *contracts.ConcurrencyLimit
}

// Submit enqueues a job for tool with input (any JSON value; empty means
// none). It returns the job as enqueued; with ErrDuplicate when its id was
// already enqueued, and then the earlier job is the one that runs.
func (p *Producer) Submit(ctx context.Context, tool string, input json.RawMessage, opts *SubmitOpts) (*contracts.Job, error) {
	var o SubmitOpts
	if opts != nil {
		o = *opts
	}
	job := &contracts.Job{
		ID: o.ID, Tool: tool, Session: o.Session, Input: input, Parent: o.Parent,
		TimeoutMs: o.TimeoutMs, MaxAttempts: o.MaxAttempts, Progress: o.Progress, Meta: o.Meta,
		CreatedAt: time.Now().UTC(), Priority: o.Priority, Concurrency: o.Concurrency,
	}
	if job.ID == "" {
		job.ID = nuid.Next()
	}
	if job.Session == "" {
		job.Session = p.cfg.Session
	}
	if err := p.SubmitJob(ctx, job, o.TraceParent); err != nil {
		if errors.Is(err, ErrDuplicate) {
			return job, err // the job is on the bus, from an earlier submit
		}
		return nil, err
	}
	return job, nil
}

type traceKey struct{}

// WithTraceParent returns ctx carrying a W3C traceparent that every job
// submitted with it carries (unless SubmitOpts.TraceParent or SubmitJob's
// argument names another), so a requester that traces its own work puts
// its jobs in its trace: with OpenTelemetry, inject the span of ctx with
// propagation.TraceContext into a map and pass its "traceparent".
func WithTraceParent(ctx context.Context, traceparent string) context.Context {
	return context.WithValue(ctx, traceKey{}, traceparent)
}

// TraceParentFrom returns the traceparent of WithTraceParent, "" when ctx
// has none.
func TraceParentFrom(ctx context.Context) string {
	tp, _ := ctx.Value(traceKey{}).(string)
	return tp
}

// SubmitJob enqueues a fully built job, after validating it, on the subject
// of its tool, Priority and its session's lane (contracts.SessionJob), with traceparent in its headers (the one of ctx, WithTraceParent, when
// empty). It returns an error matching ErrDuplicate when the bus already
// holds the job's id.
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
	msg := &nats.Msg{Data: data, Header: nats.Header{}}
	if traceparent == "" {
		traceparent = TraceParentFrom(ctx)
	}
	if traceparent != "" {
		msg.Header.Set(bus.HeaderTraceParent, traceparent)
	}
	if seq := p.catalogSeq.Load(); seq > 0 && job.Tool == contracts.ToolCodeModeExec {
		msg.Header.Set(contracts.HeaderCatalogSeq, strconv.FormatUint(seq, 10))
	}
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	lanes, err := p.checkServed(ctx, job.Tool, job.Priority)
	if err != nil {
		return err
	}
	msg.Subject = p.subject(job, lanes)
	ack, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(contracts.DedupID(job)))
	if err != nil {
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			hint := "start a worker or `toolq dev` first, which create toolq's streams"
			if p.cfg.TenantAccount {
				hint = "this tenant is not registered yet: the operator runs `toolq tenant register NAME` in the toolq account"
			}
			return fmt.Errorf("producer: submit %s: no stream takes %s (%s): %w", job.ID, msg.Subject, hint, err)
		}
		return fmt.Errorf("producer: submit %s: %w", job.ID, err)
	}
	if ack.Duplicate {
		return fmt.Errorf("%w: %s", ErrDuplicate, job.ID)
	}
	return nil
}

// AwaitOpts are the optional knobs of Await.
type AwaitOpts struct {
	// Parked also returns on a parked status (waiting, approval_pending),
	// not only on a terminal one.
	Parked bool
	// Progress also returns on a progress event (an exec.decide job asked
	// for progress writes one as soon as its decision is applied).
	Progress bool
}

func (o *AwaitOpts) match(s contracts.Status) bool {
	return s.Terminal() || (o != nil && o.Parked && s.Parked()) ||
		(o != nil && o.Progress && s == contracts.StatusProgress)
}

// Await returns the terminal event of a job (or, with Parked, the first
// parked one). It works whether the event was published before or after the
// call. It waits until ctx ends, or, when ctx has no deadline, for
// Config.AwaitTimeout (DefaultAwaitTimeout): then it fails with an error
// that matches context.DeadlineExceeded.
func (p *Producer) Await(ctx context.Context, session, jobID string, opts *AwaitOpts) (*contracts.Event, error) {
	if err := contracts.ValidateID("session", session); err != nil {
		return nil, err
	}
	if err := contracts.ValidateID("job id", jobID); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.cfg.AwaitTimeout)
		defer cancel()
	}
	w := &waiter{ch: make(chan *contracts.Event, 1), opts: opts}
	// Setting up can fail for a moment (a cluster electing a leader, a
	// reconnect): Await is a wait, so it tries again until ctx ends.
	var (
		f  *follower
		ev *contracts.Event
	)
	err := p.retrying(ctx, "await "+jobID, func() error {
		if f == nil {
			if err := p.init(ctx); err != nil {
				return err
			}
			nf, err := p.follow(ctx, session, jobID, w)
			if err != nil {
				return err
			}
			f = nf
			p.hooks.onFollowed(session, jobID)
		}
		// The follower is subscribed now; anything older is in the stream.
		lctx, cancel := p.withTimeout(ctx)
		defer cancel()
		var err error
		ev, _, err = p.events.Last(lctx, session, jobID)
		return err
	})
	if f != nil {
		defer f.remove(jobID, w)
	}
	if err != nil {
		return nil, fmt.Errorf("producer: await %s: %w", jobID, err)
	}
	if ev != nil && opts.match(ev.Data.Status) {
		return ev, nil
	}
	p.hooks.onWaiting(session, jobID)
	// The follower hands over every event stored after the waiter was
	// registered. The read above covers the ones before; but in a cluster
	// a direct get may be answered by a replica that does not have the
	// newest message yet, and an event the follower dispatched just before
	// the waiter was registered would then be missed by both. So the
	// stored event is read again while waiting, less and less often.
	recheck := awaitRecheck
	timer := time.NewTimer(recheck)
	defer timer.Stop()
	for {
		select {
		case ev := <-w.ch:
			return ev, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("producer: await %s: %w", jobID, ctx.Err())
		case <-timer.C:
			lctx, cancel := p.withTimeout(ctx)
			ev, _, err := p.events.Last(lctx, session, jobID)
			cancel()
			if err == nil && ev != nil && opts.match(ev.Data.Status) {
				return ev, nil
			}
			recheck = min(2*recheck, awaitRecheckMax)
			timer.Reset(recheck)
		}
	}
}

// awaitRecheck is how soon a waiting Await reads the job's stored event
// again, doubling up to awaitRecheckMax.
const (
	awaitRecheck    = time.Second
	awaitRecheckMax = 30 * time.Second
)

// Cancel cancels a job of session: a queued job never starts, a running
// job's context is cancelled; either way the job's terminal event is
// `cancelled`. Only a job of that session is touched: a job with the id
// in another session is not. It returns ErrFinished when the job had
// already ended, and ErrUnknownJob when the session has no trace of the
// job (no event, nothing queued): then no event is written, and only a job
// submitted afterwards with the id in this session is cancelled.
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
	if p.cfg.TenantAccount {
		return p.cancelImported(ctx, session, jobID)
	}
	// 1. A durable mark: whichever worker pulls the job later skips it.
	// The key names the session: a job of another session with this id
	// is not touched by it.
	if _, err := p.cancels.Put(ctx, contracts.CancelKey("", session, jobID), []byte(session)); err != nil {
		return fmt.Errorf("producer: cancel %s: %w", jobID, err)
	}
	// 2. Tell running workers at once; the body names the session.
	if err := p.nc.Publish(p.cfg.Subjects.Cancel(jobID), []byte(session)); err != nil {
		return fmt.Errorf("producer: cancel %s: %w", jobID, err)
	}
	// 3. End the job, unless it already ended or never was.
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
		} else {
			// No event yet: queued, or running without progress events.
			// Either way its message is still in the queue.
			queued, known, err := p.findQueued(ctx, session, jobID)
			if err != nil {
				return fmt.Errorf("producer: cancel %s: %w", jobID, err)
			}
			switch {
			case queued != nil:
				job = queued
			case known:
				// Not queued: it never was, or it ended (a worker
				// acks only after the terminal event) since the read.
				if last, _, err = p.events.Last(ctx, session, jobID); err != nil {
					return err
				}
				if last != nil {
					continue
				}
				return fmt.Errorf("%w: %s in session %s", ErrUnknownJob, jobID, session)
			}
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

// cancelImported cancels from a tenant account: the durable mark goes
// through the imported cancels bucket subject (a KV put is a publish),
// the notice through the imported cancel subject; the worker that meets the
// job writes its cancelled event, since tenants write no events.
func (p *Producer) cancelImported(ctx context.Context, session, jobID string) error {
	last, _, err := p.events.Last(ctx, session, jobID)
	if err != nil {
		return err
	}
	if last != nil && last.Data.Status.Terminal() {
		if last.Data.Status == contracts.StatusCancelled {
			return nil
		}
		return fmt.Errorf("%w: %s", ErrFinished, last.Data.Status)
	}
	// The import puts the tenant in front of the key.
	if _, err := p.js.Publish(ctx, contracts.KVSubject(p.cfg.Subjects.CancelsBucket(), contracts.CancelKey("", session, jobID)), []byte(session)); err != nil {
		return fmt.Errorf("producer: cancel %s: %w", jobID, err)
	}
	if err := p.nc.Publish(p.cfg.Subjects.Cancel(jobID), []byte(session)); err != nil {
		return fmt.Errorf("producer: cancel %s: %w", jobID, err)
	}
	return nil
}

// Close stops following every session and deletes the followers'
// consumers; it returns within about a second when the server does not
// answer. Pending Awaits end with their contexts. Close the producer
// before its connection, or its consumers are left to the server's
// inactivity threshold (5 minutes).
func (p *Producer) Close() {
	p.mu.Lock()
	fs := p.followers
	p.followers = map[string]*follower{}
	p.closed = true
	p.mu.Unlock()
	// Each follower's consumer is deleted now (each delete bounded by
	// about a second, all at once), rather than left to the server's
	// inactivity threshold: a program that makes a producer per request
	// (a CLI call, a short-lived agent turn) would otherwise leave a
	// consumer per session behind it for five minutes.
	var wg sync.WaitGroup
	for _, f := range fs {
		wg.Go(f.halt)
	}
	wg.Wait()
}

// retrying runs op until it succeeds or ctx ends, with a growing pause
// between tries: setting up a read can fail for a moment (a cluster
// electing a leader, a reconnect), and a wait should outlast that. Each
// try is bounded by op itself (withTimeout).
func (p *Producer) retrying(ctx context.Context, what string, op func() error) error {
	for attempt := 0; ; attempt++ {
		err := op()
		if err == nil {
			return nil
		}
		p.log.Debug("retrying setup", slog.String("op", what), slog.Any("err", err))
		t := time.NewTimer(min(time.Duration(attempt+1)*100*time.Millisecond, 2*time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// MaxCancelScan is how many queued jobs a Cancel reads, at most, looking
// for a job that has no event yet. Past it, the job counts as queued.
const MaxCancelScan = 10_000

// findQueued looks for job jobID of session in the default tenant's jobs
// stream, where a job stays until it ends. It returns the job when found;
// known is false when the queue is longer than MaxCancelScan and the job
// was not among the jobs read (it may be further on).
func (p *Producer) findQueued(ctx context.Context, session, jobID string) (job *contracts.Job, known bool, err error) {
	st, err := p.js.Stream(ctx, p.cfg.Subjects.JobsStream())
	if err != nil {
		return nil, false, err
	}
	want := contracts.DedupID(&contracts.Job{ID: jobID})
	var seq uint64
	for range MaxCancelScan {
		msg, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(p.cfg.Subjects.Jobs()))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, true, nil
		}
		if err != nil {
			return nil, false, err
		}
		seq = msg.Sequence + 1
		if msg.Header.Get(jetstream.MsgIDHeader) != want {
			continue
		}
		j, err := contracts.DecodeJob(msg.Data)
		if err == nil && j.ID == jobID && j.Session == session {
			return j, true, nil
		}
	}
	return nil, false, nil
}
