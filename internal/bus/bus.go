// Package bus sets up toolq's streams and buckets on JetStream and holds the
// small pieces of wire plumbing that the producer and the worker share.
package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// Config describes the streams of one deployment.
type Config struct {
	// Subjects names everything; the zero value uses the "toolq" prefix.
	Subjects contracts.Subjects
	// Replicas of every stream and bucket (1 for a single server, 3 in a cluster).
	Replicas int
	// Storage of the streams; file storage by default.
	Storage jetstream.StorageType
	// EventsMaxAge is how long events (and so results) are kept; 24 h by default.
	EventsMaxAge time.Duration
	// DLQMaxAge is how long dead letters are kept; 14 days by default.
	DLQMaxAge time.Duration
	// DuplicateWindow is the Nats-Msg-Id deduplication window of the jobs and
	// events streams; 2 minutes by default and never less.
	DuplicateWindow time.Duration
	// Tenants adds the tenants bucket (Subjects.TenantsBucket) for a server
	// that gives each tenant an account (deploy/nats/tenants.conf); each
	// tenant's jobs stream is made by EnsureTenant.
	Tenants bool
	// TenantQueueLimit caps the queued (and running) jobs of one tenant over
	// all tools when its record names no limit; a submit past it is refused
	// by the server. 10000 by default.
	TenantQueueLimit int64
	// MaxBytes bounds the streams and buckets this package makes, by stream
	// or bucket name (Subjects.JobsStream(), Subjects.CatalogBucket(), …);
	// a missing name takes DefaultMaxBytes. The server reserves each bound
	// against its storage, so the defaults are modest. A full jobs stream
	// (or tenant stream) refuses new jobs at submit; a full events, DLQ or
	// schedules stream drops its oldest messages.
	MaxBytes map[string]int64
	// TenantMaxBytes bounds each tenant's jobs stream; 128 MiB by default.
	TenantMaxBytes int64
}

// defaultMaxBytes returns the bound of the stream or bucket name when
// Config.MaxBytes does not name it.
func (c *Config) defaultMaxBytes(name string) int64 {
	subj := c.Subjects
	switch name {
	case subj.JobsStream(), subj.EventsStream():
		return 1 << 30
	case subj.DLQStream():
		return 256 << 20
	case subj.SchedulesStream():
		return 64 << 20
	case subj.CatalogBucket():
		return catalogMaxBytes
	case subj.CancelsBucket():
		return CancelsMaxBytes
	case subj.TenantsBucket():
		return tenantsBucketMaxBytes
	case subj.RunsBucket():
		return 1 << 30
	case subj.SnapshotsBucket():
		return 2 << 30
	case subj.ApprovalsBucket(), subj.SchedulesBucket():
		return 64 << 20
	case subj.ExecPolicyBucket():
		return 16 << 20
	}
	return 64 << 20
}

// maxBytes is the bound of the stream or bucket name.
func (c *Config) maxBytes(name string) int64 {
	if n, ok := c.MaxBytes[name]; ok && n != 0 {
		return n
	}
	return c.defaultMaxBytes(name)
}

// MaxBytesOf is the bound of the stream or bucket name: Config.MaxBytes's,
// else the default. The tool packs and the scheduler bound the buckets
// they make with it (runs, snapshots, approvals, exec policy, schedules).
func (c Config) MaxBytesOf(name string) int64 { return c.maxBytes(name) }

// DefaultTenantMaxBytes is the default of Config.TenantMaxBytes.
const DefaultTenantMaxBytes = 128 << 20

// catalogMaxBytes bounds the catalog bucket; catalogMaxValue one entry.
const (
	catalogMaxBytes = 16 << 20
	catalogMaxValue = 64 << 10
)

// Defaults.
const (
	DefaultEventsMaxAge    = 24 * time.Hour
	DefaultDLQMaxAge       = 14 * 24 * time.Hour
	DefaultDuplicateWindow = 2 * time.Minute
	// DefaultTenantQueueLimit is the default of Config.TenantQueueLimit.
	DefaultTenantQueueLimit = 10000
)

// WithDefaults returns cfg with zero fields set to their defaults, or an
// error when a field is out of range.
func (c Config) WithDefaults() (Config, error) {
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		return c, fmt.Errorf("bus: replicas %d out of range [1, 5]", c.Replicas)
	}
	if c.EventsMaxAge == 0 {
		c.EventsMaxAge = DefaultEventsMaxAge
	}
	if c.DLQMaxAge == 0 {
		c.DLQMaxAge = DefaultDLQMaxAge
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = DefaultDuplicateWindow
	}
	if c.TenantQueueLimit == 0 {
		c.TenantQueueLimit = DefaultTenantQueueLimit
	}
	if c.TenantQueueLimit < 0 {
		return c, fmt.Errorf("bus: negative tenant queue limit %d", c.TenantQueueLimit)
	}
	if c.TenantMaxBytes == 0 {
		c.TenantMaxBytes = DefaultTenantMaxBytes
	}
	if c.TenantMaxBytes < 0 {
		return c, fmt.Errorf("bus: negative tenant max bytes %d", c.TenantMaxBytes)
	}
	for name, n := range c.MaxBytes {
		if n < 0 {
			return c, fmt.Errorf("bus: negative max bytes %d for %s", n, name)
		}
	}
	if c.DuplicateWindow < DefaultDuplicateWindow {
		return c, fmt.Errorf("bus: duplicate window %s is shorter than %s", c.DuplicateWindow, DefaultDuplicateWindow)
	}
	if c.EventsMaxAge < c.DuplicateWindow {
		return c, fmt.Errorf("bus: events max age %s is shorter than the duplicate window", c.EventsMaxAge)
	}
	return c, nil
}

// StreamConfigs returns the configurations of the jobs, events, DLQ and
// schedules streams.
func (c Config) StreamConfigs() []jetstream.StreamConfig {
	s := c.Subjects
	scs := []jetstream.StreamConfig{
		{
			Name:        s.JobsStream(),
			Description: "toolq jobs: one durable consumer per tool",
			Subjects:    []string{s.Jobs()},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     c.Storage,
			Replicas:    c.Replicas,
			Duplicates:  c.DuplicateWindow,
			// Full means full: a submit is refused, no queued job is dropped.
			MaxBytes: c.maxBytes(s.JobsStream()),
			Discard:  jetstream.DiscardNew,
			// No message schedules: a Nats-Schedule header may target any
			// subject of its own stream, exec.decide included. They live in
			// the schedules stream.
			AllowMsgTTL: true,
		},
		{
			Name:        s.EventsStream(),
			Description: "toolq job events and results",
			// Named tenants' events too, whether or not this process serves
			// them: two workers that disagree must not flip the subjects.
			Subjects:    []string{s.Events(), s.TenantEvents()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     c.Storage,
			Replicas:    c.Replicas,
			MaxAge:      c.EventsMaxAge,
			MaxBytes:    c.maxBytes(s.EventsStream()),
			Duplicates:  c.DuplicateWindow,
			AllowDirect: true,
		},
		{
			Name:        s.DLQStream(),
			Description: "toolq jobs that exhausted their attempts",
			Subjects:    []string{s.DLQs()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     c.Storage,
			Replicas:    c.Replicas,
			MaxAge:      c.DLQMaxAge,
			MaxBytes:    c.maxBytes(s.DLQStream()),
			Duplicates:  c.DuplicateWindow,
			AllowDirect: true,
		},
		c.SchedulesStreamConfig(),
	}
	return scs
}

// SchedulesStreamConfig is the stream of NATS-native schedule messages
// (<prefix>.schedules.<id>) and their firings (<prefix>.schedules.fire.<id>),
// which the scheduler's relay turns into jobs. It is the only stream with
// message schedules on; only the scheduler writes it.
func (c Config) SchedulesStreamConfig() jetstream.StreamConfig {
	s := c.Subjects
	return jetstream.StreamConfig{
		Name:              s.SchedulesStream(),
		Description:       "toolq NATS-native schedules and their firings",
		Subjects:          []string{s.Schedules()},
		Retention:         jetstream.WorkQueuePolicy,
		Storage:           c.Storage,
		Replicas:          c.Replicas,
		Duplicates:        c.DuplicateWindow,
		MaxBytes:          c.maxBytes(s.SchedulesStream()),
		MaxMsgSize:        64 << 10,
		Discard:           jetstream.DiscardOld,
		AllowMsgSchedules: true,
	}
}

// Ensure creates or updates every stream and bucket toolq needs, applying
// cfg's defaults. It is idempotent and safe to run from many processes at
// once.
func Ensure(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return err
	}
	for _, sc := range cfg.StreamConfigs() {
		if sc.Name == cfg.Subjects.JobsStream() {
			err = ensureJobsStream(ctx, js, sc, cfg.Subjects)
		} else {
			err = ensureStream(ctx, js, sc)
		}
		if err != nil {
			return err
		}
	}
	if err := ensureStream(ctx, js, cancelsStream(cfg)); err != nil {
		return err
	}
	err = ensureStream(ctx, js, catalogStream(cfg))
	if err == nil && cfg.Tenants {
		_, err = ensureKV(ctx, js, tenantsBucket(cfg))
	}
	return err
}

// CancelsMaxBytes bounds the cancels bucket by default: about 1.5 million cancels.
const CancelsMaxBytes = 256 << 20

// cancelsStream is the stream of the cancels bucket, a bucket without
// roll-ups (noRollupKV): agents write it (tenants through their import).
func cancelsStream(cfg Config) jetstream.StreamConfig {
	bucket := cfg.Subjects.CancelsBucket()
	sc := noRollupKV(cfg, bucket, "cancelled job ids; a queued job in here never starts")
	sc.MaxAge = cfg.EventsMaxAge
	sc.MaxMsgSize = 1 << 10 // the value is the job's session
	return sc
}

// catalogStream is the stream of the catalog bucket, a bucket without
// roll-ups (noRollupKV): workers write their tools, agents their client
// tools (tenants through their import, under t.<tenant>.client.…).
func catalogStream(cfg Config) jetstream.StreamConfig {
	sc := noRollupKV(cfg, cfg.Subjects.CatalogBucket(), "tools code-mode runs can see and call")
	sc.MaxMsgSize = catalogMaxValue
	return sc
}

// noRollupKV is the stream of a KV bucket as nats.go makes one (same name,
// subjects, history 1) except that it allows no roll-ups, for a bucket that
// agents write. A put with `Nats-Rollup: all` in an ordinary bucket purges
// every key: one tenant would wipe every tenant's keys. Nothing toolq does
// purges these buckets; AllowRollup can be turned back on, unlike
// DenyPurge, so an older process that updates the bucket the KV way still
// can. A full bucket refuses new keys (DiscardNew): a storm fills the
// bucket, not the disk, and never pushes out others' keys.
func noRollupKV(cfg Config, bucket, description string) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              contracts.KVStream(bucket),
		Description:       description,
		Subjects:          []string{contracts.KVSubject(bucket, ">")},
		MaxMsgsPerSubject: 1,
		MaxBytes:          cfg.maxBytes(bucket),
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		Storage:           cfg.Storage,
		Replicas:          cfg.Replicas,
		AllowRollup:       false,
		DenyDelete:        true,
		Duplicates:        DefaultDuplicateWindow,
		AllowDirect:       true,
		Discard:           jetstream.DiscardNew,
	}
}

// ensureJobsStream creates or updates the jobs stream. A jobs stream made
// before the schedules stream existed also held <prefix>.schedules.> with
// message schedules on: its schedule messages are purged (the scheduler
// materializes every schedule again from its bucket, in the schedules
// stream), its relay consumer deleted and its subject dropped. Message
// schedules cannot be turned off on an existing stream, so such a stream
// keeps them on (and its discard policy and byte bound); workers refuse any job the server fired from a schedule
// (the Nats-Scheduler header), which closes the side door all the same.
func ensureJobsStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig, s contracts.Subjects) error {
	st, err := js.Stream(ctx, sc.Name)
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("bus: stream %s: %w", sc.Name, err)
	}
	if err == nil {
		old := st.CachedInfo().Config
		if old.AllowMsgSchedules {
			// The server refuses DiscardNew with schedules on, and a byte
			// bound with DiscardOld would drop queued jobs: such a stream
			// keeps its old limits until it is drained and made again.
			sc.AllowMsgSchedules, sc.Discard, sc.MaxBytes = true, old.Discard, old.MaxBytes
		}
		if slices.Contains(old.Subjects, s.Schedules()) {
			if err := js.DeleteConsumer(ctx, sc.Name, LegacyRelayConsumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return fmt.Errorf("bus: stream %s: old schedule relay: %w", sc.Name, err)
			}
			if err := st.Purge(ctx, jetstream.WithPurgeSubject(s.Schedules())); err != nil {
				return fmt.Errorf("bus: stream %s: old schedules: %w", sc.Name, err)
			}
		}
	}
	return ensureStream(ctx, js, sc)
}

// LegacyRelayConsumer is the scheduler's relay consumer as it was on the
// jobs stream, before schedules had a stream of their own.
const LegacyRelayConsumer = "scheduler_relay"

// EnsureKV creates or updates a bucket; safe from many processes at once.
func EnsureKV(ctx context.Context, js jetstream.JetStream, kc jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return ensureKV(ctx, js, kc)
}

func ensureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	var err error
	for range 5 {
		_, err = js.CreateOrUpdateStream(ctx, sc)
		if err == nil {
			return nil
		}
		// Another process created it between our update and our create: update again.
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			break
		}
	}
	return fmt.Errorf("bus: ensure stream %s: %w", sc.Name, err)
}

func ensureKV(ctx context.Context, js jetstream.JetStream, kc jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	var (
		kv  jetstream.KeyValue
		err error
	)
	for range 5 {
		kv, err = js.CreateOrUpdateKeyValue(ctx, kc)
		if err == nil {
			return kv, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) && !errors.Is(err, jetstream.ErrBucketExists) {
			break
		}
	}
	return nil, fmt.Errorf("bus: ensure bucket %s: %w", kc.Bucket, err)
}

// IsWrongLastSequence reports whether err is JetStream refusing a publish
// whose expected last (subject) sequence did not match: someone else wrote
// first.
func IsWrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}
