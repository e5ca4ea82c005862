package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/toolq/toolq/contracts"
)

// tenantsBucketMaxBytes bounds the tenants bucket: records are a few dozen
// bytes, so this is room for hundreds of thousands of tenants.
const tenantsBucketMaxBytes = 64 << 20

func tenantsBucket(cfg Config) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:       cfg.Subjects.TenantsBucket(),
		Description:  "named tenants: each has a jobs stream that workers serving tenants consume",
		MaxBytes:     cfg.maxBytes(cfg.Subjects.TenantsBucket()),
		MaxValueSize: 4 << 10,
		Storage:      cfg.Storage,
		Replicas:     cfg.Replicas,
	}
}

// TenantStreamConfig returns the configuration of rec's jobs stream. The
// stream is the tenant's own so that its duplicate window (job ids) and
// its queue quota are too: one tenant's ids can never shadow another's.
func (c Config) TenantStreamConfig(rec contracts.TenantRecord) jetstream.StreamConfig {
	limit := rec.QueueLimit
	if limit <= 0 {
		limit = c.TenantQueueLimit
	}
	return jetstream.StreamConfig{
		Name:        c.Subjects.TenantJobsStream(rec.Name),
		Description: "toolq jobs of tenant " + rec.Name + ": one durable consumer per tool",
		Subjects:    []string{c.Subjects.TenantJobs(rec.Name)},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     c.Storage,
		Replicas:    c.Replicas,
		Duplicates:  c.DuplicateWindow,
		// The tenant's quota, kept by the server: a publish past it is refused.
		MaxMsgs:  limit,
		MaxBytes: c.TenantMaxBytes,
		Discard:  jetstream.DiscardNew,
		// No message schedules: nothing but the tenant's own clients, through
		// its import, writes here.
	}
}

// EnsureTenant creates or updates rec's jobs stream.
func EnsureTenant(ctx context.Context, js jetstream.JetStream, cfg Config, rec contracts.TenantRecord) error {
	cfg, err := cfg.WithDefaults()
	if err != nil {
		return err
	}
	if !contracts.ValidID(rec.Name) {
		return fmt.Errorf("bus: tenant name %q is not a valid id", rec.Name)
	}
	if rec.QueueLimit < 0 {
		return fmt.Errorf("bus: tenant %s: negative queue limit %d", rec.Name, rec.QueueLimit)
	}
	if err := CheckApprovers(rec.Approvers); err != nil {
		return fmt.Errorf("bus: tenant %s: %w", rec.Name, err)
	}
	return ensureStream(ctx, js, cfg.TenantStreamConfig(rec))
}

// AddTenant makes rec's jobs stream and writes its record, which tells
// every worker serving tenants to consume it. Adding a tenant again
// replaces its limit and approvers.
func AddTenant(ctx context.Context, js jetstream.JetStream, cfg Config, rec contracts.TenantRecord) error {
	cfg.Tenants = true
	if err := Ensure(ctx, js, cfg); err != nil {
		return err
	}
	if rec.Added.IsZero() {
		rec.Added = time.Now().UTC()
	}
	if err := EnsureTenant(ctx, js, cfg, rec); err != nil {
		return err
	}
	kv, err := js.KeyValue(ctx, cfg.Subjects.TenantsBucket())
	if err != nil {
		return fmt.Errorf("bus: tenants bucket: %w", err)
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, rec.Name, data); err != nil {
		return fmt.Errorf("bus: tenant %s: %w", rec.Name, err)
	}
	return nil
}

// RemoveTenant deletes rec's record, so workers stop consuming its jobs,
// and its jobs stream with every job still queued in it.
func RemoveTenant(ctx context.Context, js jetstream.JetStream, s contracts.Subjects, name string) error {
	kv, err := js.KeyValue(ctx, s.TenantsBucket())
	if err != nil {
		return fmt.Errorf("bus: tenants bucket: %w", err)
	}
	if err := kv.Delete(ctx, name); err != nil {
		return fmt.Errorf("bus: tenant %s: %w", name, err)
	}
	if err := js.DeleteStream(ctx, s.TenantJobsStream(name)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("bus: tenant %s: jobs stream: %w", name, err)
	}
	return nil
}

// DecodeTenant reads a tenants-bucket entry stored under key.
func DecodeTenant(key string, data []byte) (contracts.TenantRecord, error) {
	var rec contracts.TenantRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, fmt.Errorf("bus: tenant %s: %w", key, err)
	}
	if rec.Name != key || !contracts.ValidID(rec.Name) {
		return rec, fmt.Errorf("bus: tenant record under %q names %q", key, rec.Name)
	}
	if rec.QueueLimit < 0 {
		return rec, fmt.Errorf("bus: tenant %s: negative queue limit", key)
	}
	if rec.Weight < 0 || rec.Weight > contracts.MaxTenantWeight {
		return rec, fmt.Errorf("bus: tenant %s: weight %d out of range [0, %d]", key, rec.Weight, contracts.MaxTenantWeight)
	}
	if err := CheckApprovers(rec.Approvers); err != nil {
		return rec, fmt.Errorf("bus: tenant %s: %w", key, err)
	}
	return rec, nil
}

// MaxTenantApprovers bounds the approvers of one tenant record.
const MaxTenantApprovers = 64

// CheckApprovers accepts a tenant's approver keys: public user ("U…") or
// account ("A…") nkeys, at most MaxTenantApprovers.
func CheckApprovers(keys []string) error {
	if len(keys) > MaxTenantApprovers {
		return fmt.Errorf("%d approvers, more than %d", len(keys), MaxTenantApprovers)
	}
	for _, k := range keys {
		if !nkeys.IsValidPublicUserKey(k) && !nkeys.IsValidPublicAccountKey(k) {
			return fmt.Errorf("approver %q is not a public user or account nkey", k)
		}
	}
	return nil
}
