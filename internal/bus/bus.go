// Package bus sets up toolq's streams and buckets on JetStream and holds the
// small pieces of wire plumbing that the producer and the worker share.
package bus

import (
	"context"
	"errors"
	"fmt"
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
}

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
	if c.DuplicateWindow < DefaultDuplicateWindow {
		return c, fmt.Errorf("bus: duplicate window %s is shorter than %s", c.DuplicateWindow, DefaultDuplicateWindow)
	}
	if c.EventsMaxAge < c.DuplicateWindow {
		return c, fmt.Errorf("bus: events max age %s is shorter than the duplicate window", c.EventsMaxAge)
	}
	return c, nil
}

// StreamConfigs returns the configurations of the jobs, events and DLQ streams.
func (c Config) StreamConfigs() []jetstream.StreamConfig {
	s := c.Subjects
	scs := []jetstream.StreamConfig{
		{
			Name:        s.JobsStream(),
			Description: "toolq jobs: one durable consumer per tool",
			Subjects:    []string{s.Jobs(), s.Schedules()},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     c.Storage,
			Replicas:    c.Replicas,
			Duplicates:  c.DuplicateWindow,
			Discard:     jetstream.DiscardOld,
			// Message schedules (the NATS-native scheduler engine) live in this stream.
			AllowMsgSchedules: true,
			AllowMsgTTL:       true,
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
			Duplicates:  c.DuplicateWindow,
			AllowDirect: true,
		},
	}
	return scs
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
		if err := ensureStream(ctx, js, sc); err != nil {
			return err
		}
	}
	if err := ensureStream(ctx, js, cancelsStream(cfg)); err != nil {
		return err
	}
	_, err = ensureKV(ctx, js, jetstream.KeyValueConfig{
		Bucket:      cfg.Subjects.CatalogBucket(),
		Description: "tools code-mode runs can see and call",
		Storage:     cfg.Storage,
		Replicas:    cfg.Replicas,
	})
	if err == nil && cfg.Tenants {
		_, err = ensureKV(ctx, js, tenantsBucket(cfg))
	}
	return err
}

// CancelsMaxBytes bounds the cancels bucket: about 1.5 million cancels.
const CancelsMaxBytes = 256 << 20

// cancelsStream is the stream of the cancels bucket: a KV bucket as
// nats.go makes one (same name, subjects, history 1, TTL), except that it
// allows no roll-ups. Agents write it (tenants through their import), and
// a put with `Nats-Rollup: all` in an ordinary bucket purges every key:
// one tenant would wipe every tenant's cancels. Nothing toolq does purges
// a cancel; AllowRollup can be turned back on, unlike DenyPurge, so an
// older process that updates the bucket the KV way still can.
func cancelsStream(cfg Config) jetstream.StreamConfig {
	bucket := cfg.Subjects.CancelsBucket()
	return jetstream.StreamConfig{
		Name:              contracts.KVStream(bucket),
		Description:       "cancelled job ids; a queued job in here never starts",
		Subjects:          []string{contracts.KVSubject(bucket, ">")},
		MaxMsgsPerSubject: 1,
		MaxBytes:          CancelsMaxBytes, // a cancel storm fills this bucket, not the disk
		MaxAge:            cfg.EventsMaxAge,
		MaxMsgSize:        1 << 10, // the value is the job's session
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
