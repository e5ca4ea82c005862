package worker

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolq/toolq/contracts"
)

// Config configures a Worker. The zero value is usable.
type Config struct {
	// Name identifies this worker in events and logs; hostname-based by default.
	Name string
	// Subjects names the streams and subjects; prefix "toolq" by default.
	Subjects contracts.Subjects
	// Replicas and Storage of the streams the worker creates or updates.
	Replicas int
	Storage  jetstream.StorageType
	// EventsMaxAge is how long events (results) are kept; 24 h by default.
	EventsMaxAge time.Duration
	// StopTimeout is how long Stop lets in-flight jobs finish before it
	// cancels them (when its context has no earlier deadline); 30 s by default.
	StopTimeout time.Duration
	// ConcurrencyLeaseTTL is how long a slot of a concurrency key stays
	// held by a worker that stopped renewing it (it died); 30 s by default.
	// It is the concurrency bucket's TTL: give every worker the same.
	ConcurrencyLeaseTTL time.Duration
	// PublishRetry is how long a worker keeps trying to store a job's
	// outcome (its terminal event, its report to a parent run) through a
	// bus outage before it hands the job back; 30 s by default.
	PublishRetry time.Duration
	// MaxResultBytes caps a handler's result; a larger one fails the job with
	// output_limit_exceeded. 512 KiB by default.
	MaxResultBytes int
	// Tool is the default configuration of every registered tool.
	Tool ToolConfig
	// Builtins adds the diagnostic tools noop and sleep (with their catalog
	// entries). Off by default: a production worker runs only the tools it
	// is given; `toolq dev`, the bench and tests turn them on.
	Builtins bool
	// Tenants also serves the named tenants of a server that gives each
	// tenant an account (deploy/nats/tenants.conf): the worker follows the
	// tenants bucket (`toolq tenant register`), and every tool gets one more
	// consumer per registered tenant, on that tenant's jobs stream; each
	// job's tenant comes from its subject. Off by default (one tenant, the
	// default one).
	Tenants bool
	// SessionLanes keeps the session lanes of every tool, tenant and level
	// apart (contracts.SessionLanes): each lane gets a consumer of its own,
	// so one session's backlog delays only the sessions hashed to its lane,
	// at the cost of SessionLanes times the consumers and idle pulls. Off
	// (the default), one consumer a level takes every lane's subjects in
	// the order they came. Give every worker of a deployment the same: a
	// worker that starts with the other setting takes the consumers over,
	// once they are paused and nothing they delivered is pending (at most
	// StopTimeout; a job still running then leaves them as they are until
	// a later start), so no job is run twice or left behind by the switch.
	SessionLanes bool
	// TenantQueueLimit caps the queued and running jobs of a tenant over
	// all tools when its record names no limit (the server refuses a submit
	// past it); 10000 by default.
	TenantQueueLimit int64
	// MaxQueueTime is how long a job may wait for a tool that no worker is
	// serving (no consumer, or one with no pull waiting and no job in
	// flight) before it is moved to the DLQ with a failed event
	// (runtime_unavailable, "no worker served tool X within D"), so its
	// requester hears. Every worker sweeps for such jobs, whatever tools
	// it runs. 15 min by default; negative turns the limit off.
	MaxQueueTime time.Duration
	// MaxQueueTimes overrides MaxQueueTime per tool (by tool name, for
	// tools this worker need not run); 0 or less turns it off for the tool.
	MaxQueueTimes map[string]time.Duration
	// Logger receives structured logs; slog.Default() when nil.
	Logger *slog.Logger
	// Observer receives the worker's figures for metrics (package metrics
	// has the Prometheus one); nil for none.
	Observer Observer
	// Tracer starts the spans of distributed traces (package tracing has
	// the OpenTelemetry one); nil for none, which costs nothing.
	Tracer Tracer
	// LagInterval is how often the worker reads its consumers' backlog for
	// the Observer (one consumer listing per jobs stream served); 15 s by
	// default.
	LagInterval time.Duration
	// CatalogTTL is how long the catalog entries of this worker's tools
	// outlive it: each is written with this TTL and again every third of
	// it while the worker runs, so a tool whose workers have all stopped
	// or died leaves code-mode runs' catalogs within CatalogTTL (while
	// another worker serves it, it stays). DefaultCatalogTTL when zero, at
	// least one second; negative writes entries that never expire, once.
	CatalogTTL time.Duration
}

// DefaultCatalogTTL is Config.CatalogTTL when zero.
const DefaultCatalogTTL = 90 * time.Second

// DefaultMaxQueueTime is the queue-time limit of Config.MaxQueueTime when
// it is zero.
const DefaultMaxQueueTime = 15 * time.Minute

// ToolConfig configures how one tool's jobs are run.
type ToolConfig struct {
	// Concurrency is the number of jobs of this tool run at once by this
	// worker; 16 by default.
	Concurrency int
	// Timeout bounds one attempt when the job sets none; 5 min by default.
	Timeout time.Duration
	// AckWait is how long JetStream waits for an ack or a heartbeat before it
	// redelivers; 30 s by default. Running jobs send InProgress every AckWait/3.
	AckWait time.Duration
	// MaxAckPending bounds the unacknowledged jobs of this tool, of each
	// priority level, across every worker; 4096 by default.
	MaxAckPending int
	// NormalOnly takes the tool's jobs at normal priority only: no consumer
	// is made for the other levels. For tools whose subject a permission
	// guards (exec.decide, code_mode.result), where a level's subject would
	// be a way around a deny rule.
	NormalOnly bool
	// ConcurrencyWaiters is how many of the tool's jobs may wait on this
	// worker for a slot of their concurrency key (holding no slot of the
	// tool) before the worker stops taking the tool's jobs until some of
	// them run; 256 by default. So a key's backlog is not drained into one
	// worker: past it, the jobs stay queued for every worker.
	ConcurrencyWaiters int
	// Retry is the retry policy.
	Retry RetryPolicy
	// RateLimits, when set, names the rate limits a job takes one start of
	// before it runs, after its tool's limit for its tenant (say, the
	// provider API key a code_execution job will call first). Each is a
	// default: the operator's limit under one of its OverrideKeys in the
	// limits bucket replaces it, and one with Rate 0 limits only when the
	// operator set one. A job over a limit waits as for its tool's (no
	// attempt spent, its tool slot given back, one throttled event).
	RateLimits func(job *contracts.Job) []*contracts.RateLimit
	// Ready, when set, gates pulling: while it returns false (say, every
	// provider's breaker is open) the worker takes no new jobs of this tool.
	// It is polled every ReadyInterval (250 ms by default).
	Ready         func() bool
	ReadyInterval time.Duration
	// Catalog describes the tool to code-mode runs; the worker registers it
	// in the toolq_catalog bucket at Start. ID defaults to toolq:core:<tool>
	// (dots become "_"), Source to toolq, Name to the tool. Nil keeps the
	// tool out of the catalog.
	Catalog *contracts.CatalogTool
	// DefaultTenantOnly keeps the tool to the default tenant under
	// Config.Tenants: a named tenant's job of it fails with invalid_input.
	// A tool pack sets it while its own records (runs, approvals, nested
	// calls) do not yet carry a job's tenant, and for tools only toolq's
	// own processes may submit (a run's continuation).
	DefaultTenantOnly bool
	// Tenants, when set, keeps the tool to these tenants ("" is the
	// default tenant): the worker pulls the tool's jobs only from their
	// streams (another tenant's job of it waits for a worker that serves
	// it, and the queue-time limit fails it as runtime_unavailable), and
	// its catalog entry names them, so only their code-mode runs see it.
	// Nil: every tenant the worker serves.
	Tenants []string
}

// servesTenant reports whether the tool serves tenant's jobs.
func (c *ToolConfig) servesTenant(tenant string) bool {
	return c.Tenants == nil || slices.Contains(c.Tenants, tenant)
}

// RetryPolicy is exponential backoff with jitter for retryable failures.
type RetryPolicy struct {
	// MaxAttempts is the most attempts a job gets (a job may ask for fewer,
	// never more); 5 by default.
	MaxAttempts int
	// InitialInterval is the delay before the second attempt; 1 s by default.
	InitialInterval time.Duration
	// MaxInterval caps any delay; 5 min by default.
	MaxInterval time.Duration
	// Multiplier grows the delay per attempt; 2 by default.
	Multiplier float64
	// RandomizationFactor spreads each delay over ±factor; 0.5 by default,
	// negative for none.
	RandomizationFactor float64
}

// Delay returns the wait before attempt+1 after attempt (1-based) failed.
func (p RetryPolicy) Delay(attempt int) time.Duration {
	rf := p.RandomizationFactor
	if rf < 0 {
		rf = 0
	}
	b := &backoff.ExponentialBackOff{
		InitialInterval:     p.InitialInterval,
		RandomizationFactor: rf,
		Multiplier:          p.Multiplier,
		MaxInterval:         p.MaxInterval,
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	b.Reset()
	d := b.NextBackOff()
	for i := 1; i < attempt; i++ {
		d = b.NextBackOff()
	}
	return d
}

func (p RetryPolicy) withDefaults(def RetryPolicy) (RetryPolicy, error) {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = def.MaxAttempts
	}
	if p.InitialInterval == 0 {
		p.InitialInterval = def.InitialInterval
	}
	if p.MaxInterval == 0 {
		p.MaxInterval = def.MaxInterval
	}
	if p.Multiplier == 0 {
		p.Multiplier = def.Multiplier
	}
	if p.RandomizationFactor == 0 {
		p.RandomizationFactor = def.RandomizationFactor
	}
	switch {
	case p.MaxAttempts < 1 || p.MaxAttempts > contracts.MaxAttemptsLimit:
		return p, fmt.Errorf("worker: retry max attempts %d out of range [1, %d]", p.MaxAttempts, contracts.MaxAttemptsLimit)
	case p.InitialInterval < 0 || p.MaxInterval < p.InitialInterval:
		return p, fmt.Errorf("worker: retry intervals %s..%s invalid", p.InitialInterval, p.MaxInterval)
	case p.Multiplier < 1:
		return p, fmt.Errorf("worker: retry multiplier %v below 1", p.Multiplier)
	case p.RandomizationFactor > 1:
		return p, fmt.Errorf("worker: retry randomization %v above 1", p.RandomizationFactor)
	}
	return p, nil
}

var defaultTool = ToolConfig{
	ConcurrencyWaiters: 256,
	Concurrency:        16,
	Timeout:            5 * time.Minute,
	AckWait:            30 * time.Second,
	MaxAckPending:      4096,
	Retry: RetryPolicy{
		MaxAttempts:         5,
		InitialInterval:     time.Second,
		MaxInterval:         5 * time.Minute,
		Multiplier:          2,
		RandomizationFactor: 0.5,
	},
}

func (c ToolConfig) withDefaults(def ToolConfig) (ToolConfig, error) {
	if c.Concurrency == 0 {
		c.Concurrency = def.Concurrency
	}
	if c.Timeout == 0 {
		c.Timeout = def.Timeout
	}
	if c.AckWait == 0 {
		c.AckWait = def.AckWait
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = def.MaxAckPending
	}
	if c.ReadyInterval == 0 {
		c.ReadyInterval = 250 * time.Millisecond
	}
	if c.ConcurrencyWaiters == 0 {
		c.ConcurrencyWaiters = def.ConcurrencyWaiters
	}
	var err error
	if c.Retry, err = c.Retry.withDefaults(def.Retry); err != nil {
		return c, err
	}
	switch {
	case c.Concurrency < 1 || c.Concurrency > 10000:
		return c, fmt.Errorf("worker: concurrency %d out of range [1, 10000]", c.Concurrency)
	case c.ConcurrencyWaiters < 0:
		return c, fmt.Errorf("worker: negative concurrency waiters")
	case c.Timeout < 0:
		return c, fmt.Errorf("worker: negative timeout")
	case c.AckWait < 100*time.Millisecond:
		return c, fmt.Errorf("worker: ack wait %s below 100ms", c.AckWait)
	case c.MaxAckPending < c.Concurrency:
		return c, fmt.Errorf("worker: max ack pending %d below concurrency %d", c.MaxAckPending, c.Concurrency)
	}
	return c, nil
}

func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "worker"
		}
		c.Name = host + "-" + nuid.Next()[:8]
	}
	if c.ConcurrencyLeaseTTL == 0 {
		c.ConcurrencyLeaseTTL = 30 * time.Second
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = 30 * time.Second
	}
	if c.PublishRetry == 0 {
		c.PublishRetry = 30 * time.Second
	}
	if c.MaxResultBytes == 0 {
		c.MaxResultBytes = 512 << 10
	}
	if c.MaxQueueTime == 0 {
		c.MaxQueueTime = DefaultMaxQueueTime
	}
	for tool := range c.MaxQueueTimes {
		if !contracts.ValidTool(tool) {
			return c, contracts.Errorf(contracts.CodeInvalidInput, "worker: max queue time of %q: not a tool name", tool)
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.CatalogTTL == 0:
		c.CatalogTTL = DefaultCatalogTTL
	case c.CatalogTTL > 0 && c.CatalogTTL < time.Second:
		return c, fmt.Errorf("worker: catalog TTL %s below 1s", c.CatalogTTL)
	}
	if c.LagInterval == 0 {
		c.LagInterval = 15 * time.Second
	}
	var err error
	if c.Tool, err = c.Tool.withDefaults(defaultTool); err != nil {
		return c, err
	}
	if c.LagInterval < time.Second {
		return c, fmt.Errorf("worker: lag interval %s below 1s", c.LagInterval)
	}
	if c.ConcurrencyLeaseTTL < time.Second {
		return c, fmt.Errorf("worker: concurrency lease TTL %s below 1s", c.ConcurrencyLeaseTTL)
	}
	if c.StopTimeout < 0 || c.MaxResultBytes < 0 {
		return c, fmt.Errorf("worker: negative stop timeout or result cap")
	}
	return c, nil
}
