package shellexec

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/shell"
)

// Tool names on the bus.
const (
	// ToolExec runs a shell command under the worker's policy.
	ToolExec = contracts.ToolExec
	// ToolDecide carries a person's signed decision on an approval. Only
	// approvers may publish to its subject (see deploy/nats/approvers.conf);
	// the worker verifies every decision's signature anyway.
	ToolDecide = contracts.ToolExecDecide
)

// Defaults.
const (
	// DefaultPolicyKey is the key of the shared policy in the policy bucket.
	DefaultPolicyKey = "default"
	// DefaultDecidedTTL is how long a decided approval record is kept, so a
	// second decision finds it decided rather than unknown.
	DefaultDecidedTTL = 24 * time.Hour
	// DefaultMaxStreamBytes caps the output a background session streams
	// as progress events, per stream.
	DefaultMaxStreamBytes = 1 << 20
	// DefaultFlushInterval is how often a background session publishes its
	// new output.
	DefaultFlushInterval = 250 * time.Millisecond
	// DefaultMaxSessions bounds the background sessions of one worker.
	DefaultMaxSessions = 64
)

// Config configures the exec tool on a worker.
type Config struct {
	// Policy is this worker's exec policy: its modes are the loosest a job
	// may run under, and its host settings (PATH, shell, workdir roots,
	// worker host) are the only ones. The shared policy in the
	// toolq_exec_policy bucket adds allowlist entries and safe bins and may
	// tighten the modes; a job can only tighten them further.
	Policy shell.Policy
	// Runner configures how plans run (bubblewrap, output caps, scratch
	// directories).
	Runner shell.RunnerConfig
	// Approvers are the public nkeys (user "U…" or account "A…") whose
	// signed decisions this worker accepts for the default tenant. With
	// none, nothing of the default tenant that needs approval can run.
	// A named tenant's approvers are those of its record in the tenants
	// bucket (contracts.TenantRecord.Approvers).
	Approvers []string
	// ApproversForTenants also lets Approvers decide named tenants'
	// approvals. Off by default: an operator's key then approves only the
	// default tenant's commands, and a tenant's only its own approvers.
	ApproversForTenants bool
	// Tenants says the worker serves named tenants (worker.Config.Tenants):
	// it then takes exec.decide jobs even without Approvers of its own,
	// for the tenants' approvers.
	Tenants bool
	// ApprovalTTL is how long an approval waits for a person before the
	// job is denied with reason timeout; shell.DefaultApprovalTTL when 0.
	ApprovalTTL time.Duration
	// ApprovalRunningNoticeMs: one running_notice event when an approved
	// command runs longer than this (the exec contract); nil means
	// shell.DefaultRunningNoticeMs, 0 disables.
	ApprovalRunningNoticeMs *int
	// DecidedTTL is how long a decided approval is kept; DefaultDecidedTTL
	// when 0.
	DecidedTTL time.Duration
	// PolicyKey is the key of the shared policy; DefaultPolicyKey when empty.
	PolicyKey string
	// MaxStreamBytes caps what a background session streams per stream;
	// DefaultMaxStreamBytes when 0. FlushInterval is how often it streams.
	MaxStreamBytes int
	FlushInterval  time.Duration
	// MaxSessions bounds the background sessions this worker runs at once
	// (they run outside the tool's job concurrency); DefaultMaxSessions
	// when 0. Past it, background jobs fail with runtime_unavailable and
	// foreground commands do not yield.
	MaxSessions int
	// Subjects names streams and buckets; it must match the worker's.
	Subjects contracts.Subjects
	// Replicas and Storage of the approvals and policy buckets.
	Replicas int
	Storage  jetstream.StorageType
	// MaxBytes bounds the approvals and exec-policy buckets, by name;
	// 64 MiB and 16 MiB by default (bus.Config.MaxBytesOf).
	MaxBytes map[string]int64
	// Logger receives structured logs; slog.Default() when nil.
	Logger *slog.Logger
	// Observer is told of approvals asked for and decided, for metrics
	// (package metrics has the Prometheus one); nil for none. A
	// PendingObserver is also told what waits, every PendingScanInterval
	// (15 s by default).
	Observer            Observer
	PendingScanInterval time.Duration
}

// Observer receives exec's figures. Its methods must be safe to call at
// once from many jobs and must not block. tenant is "" for the default
// tenant.
type Observer interface {
	// ApprovalRequested: a command was parked as approval_pending (once
	// per approval, not per redelivery).
	ApprovalRequested(tenant string)
	// ApprovalDecided: an approval was decided, by verdict: approved,
	// denied, or expired (nobody decided within its TTL).
	ApprovalDecided(tenant, verdict string)
}

func (c Config) withDefaults() (Config, error) {
	if c.ApprovalTTL == 0 {
		c.ApprovalTTL = shell.DefaultApprovalTTL
	}
	if c.PendingScanInterval == 0 {
		c.PendingScanInterval = 15 * time.Second
	}
	if c.ApprovalRunningNoticeMs == nil {
		ms := shell.DefaultRunningNoticeMs
		c.ApprovalRunningNoticeMs = &ms
	} else {
		ms := *c.ApprovalRunningNoticeMs
		c.ApprovalRunningNoticeMs = &ms
	}
	if c.DecidedTTL == 0 {
		c.DecidedTTL = DefaultDecidedTTL
	}
	if c.PolicyKey == "" {
		c.PolicyKey = DefaultPolicyKey
	}
	if c.MaxStreamBytes == 0 {
		c.MaxStreamBytes = DefaultMaxStreamBytes
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.PendingScanInterval < 100*time.Millisecond:
		return c, errors.New("shellexec: pending scan interval below 100ms")
	case c.ApprovalTTL < time.Second:
		return c, fmt.Errorf("shellexec: approval TTL %s below 1s", c.ApprovalTTL)
	case c.DecidedTTL < c.ApprovalTTL:
		return c, fmt.Errorf("shellexec: decided TTL %s shorter than the approval TTL %s", c.DecidedTTL, c.ApprovalTTL)
	case *c.ApprovalRunningNoticeMs < 0:
		return c, errors.New("shellexec: negative approvalRunningNoticeMs")
	case c.MaxStreamBytes < 0 || c.FlushInterval < 0 || c.MaxSessions < 0:
		return c, errors.New("shellexec: negative stream cap, flush interval or session cap")
	case !contracts.ValidTool(c.PolicyKey):
		return c, fmt.Errorf("shellexec: policy key %q is not a valid key", c.PolicyKey)
	}
	if err := c.Policy.Validate(); err != nil {
		return c, fmt.Errorf("shellexec: %w", err)
	}
	c.Approvers = append([]string(nil), c.Approvers...)
	for _, k := range c.Approvers {
		if !nkeys.IsValidPublicUserKey(k) && !nkeys.IsValidPublicAccountKey(k) {
			return c, fmt.Errorf("shellexec: approver %q is not a public user or account nkey", k)
		}
	}
	return c, nil
}

// runningNotice returns the notice delay, 0 when disabled.
func (c Config) runningNotice() time.Duration {
	return time.Duration(*c.ApprovalRunningNoticeMs) * time.Millisecond
}
