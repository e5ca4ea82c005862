package codemode

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/sandbox"
)

// Config configures code mode on a worker.
type Config struct {
	// Engine runs the guest code; required.
	Engine *sandbox.Engine
	// Subjects names streams and buckets; it must match the worker's.
	Subjects contracts.Subjects
	// Replicas and Storage of the runs bucket and the snapshot store.
	Replicas int
	Storage  jetstream.StorageType
	// MaxBytes bounds the runs bucket and the snapshot store, by name
	// (Subjects.RunsBucket(), Subjects.SnapshotsBucket()); 1 GiB and 2 GiB
	// by default (bus.Config.MaxBytesOf). A full bucket refuses new
	// suspensions, never drops a suspended run.
	MaxBytes map[string]int64
	// Limits are the defaults of a run (the code-mode contract's when zero); a job's
	// limits override them field by field, capped by MaxLimits.
	Limits sandbox.Limits
	// MaxLimits caps what a job may ask for; Limits when zero.
	MaxLimits sandbox.Limits
	// SnapshotTTLSeconds is how long a waiting run lives; 900 by default
	// (the code-mode contract); a job may ask for less, or more up to MaxSnapshotTTL.
	SnapshotTTL    time.Duration
	MaxSnapshotTTL time.Duration
	// Allow, when not empty, lists the catalog ids this worker's policy
	// lets runs see; Deny lists ids they never see.
	Allow []string
	Deny  []string
	// ShellExec lets runs call the shell exec tool (its catalog entry,
	// toolq:core:exec, with approvals parking the run). Off by default: the
	// code-mode contract never exposes the plain shell to guest code. Even
	// when on, only a run whose job lists the tool's id in tools gets it.
	ShellExec bool
	// MaxSuspendedPerSession caps the runs of one session waiting at once
	// (the code-mode contract: 64).
	MaxSuspendedPerSession int
	// MaxSuspendedPerTenant caps the runs of one named tenant waiting at
	// once, over all its sessions; 1000 by default. The default tenant (a
	// single-tenant deployment's own) has only the per-session cap.
	MaxSuspendedPerTenant int
	// LeaseTTL is how long a resume may hold a run before another worker
	// may take it over; 30 s by default.
	LeaseTTL time.Duration
	// SweepInterval is how often a worker looks for autoResume runs that
	// could resume but that nobody resumes (a lease that ran out, results
	// back with no resume under way); LeaseTTL by default.
	SweepInterval time.Duration
	// InlineSnapshotBytes: snapshots up to this size live in the run record,
	// larger ones in the object store; 64 KiB by default.
	InlineSnapshotBytes int
	// MaxResultBytes caps the JSON of a CodeModeResult this worker writes
	// (a job's result, a failure's details, a waiting event); a larger one
	// fails the run at once with output_limit_exceeded, never retried. It
	// must not exceed the worker's MaxResultBytes nor the server's max
	// payload; 256 KiB by default.
	MaxResultBytes int
	// Logger receives structured logs; slog.Default() when nil.
	Logger *slog.Logger
	// Observer is told of suspends and resumes, for metrics (package
	// metrics has the Prometheus one); nil for none.
	Observer Observer
	// RunsScanInterval is how often a RunsObserver is told how many runs
	// are stored; 15 s by default.
	RunsScanInterval time.Duration
}

// Observer receives code mode's figures. Its methods must be safe to call
// at once from many runs and must not block.
type Observer interface {
	// Suspended: a run was suspended to a snapshot of snapshotBytes (at
	// its exec, and after each resume that waits again).
	Suspended(snapshotBytes int)
	// Resumed: a run's VM came back, restored from its snapshot, or
	// rebuilt by replaying a restartSafe run's code (replayed).
	Resumed(replayed bool)
}

func (c Config) withDefaults() (Config, error) {
	if c.Engine == nil {
		return c, errors.New("codemode: an engine is required")
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.SnapshotTTL == 0 {
		c.SnapshotTTL = 900 * time.Second
	}
	if c.MaxSnapshotTTL == 0 {
		c.MaxSnapshotTTL = max(c.SnapshotTTL, 24*time.Hour)
	}
	if c.MaxSuspendedPerSession == 0 {
		c.MaxSuspendedPerSession = 64
	}
	if c.MaxSuspendedPerTenant == 0 {
		c.MaxSuspendedPerTenant = 1000
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 30 * time.Second
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = c.LeaseTTL
	}
	if c.InlineSnapshotBytes == 0 {
		c.InlineSnapshotBytes = 64 << 10
	}
	if c.RunsScanInterval == 0 {
		c.RunsScanInterval = 15 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxResultBytes == 0 {
		c.MaxResultBytes = 256 << 10
	}
	c.Limits = fillLimits(c.Limits, sandbox.DefaultLimits())
	if c.SnapshotTTL < time.Second || c.MaxSnapshotTTL < c.SnapshotTTL {
		return c, fmt.Errorf("codemode: snapshot TTL %s (max %s) invalid", c.SnapshotTTL, c.MaxSnapshotTTL)
	}
	if c.LeaseTTL < 100*time.Millisecond || c.MaxSuspendedPerSession < 1 || c.MaxSuspendedPerTenant < 1 || c.InlineSnapshotBytes < 0 || c.MaxResultBytes < 1024 ||
		c.SweepInterval < 10*time.Millisecond || c.RunsScanInterval < 100*time.Millisecond {
		return c, errors.New("codemode: lease TTL, suspended cap or inline size out of range")
	}
	return c, nil
}

// effectiveLimits merges a job's limits over the worker's defaults, refusing
// any above the worker's maximums.
func (c Config) effectiveLimits(job *sandbox.Limits) (sandbox.Limits, error) {
	l := c.Limits
	if job == nil {
		return l, nil
	}
	caps := c.MaxLimits
	fields := []struct {
		name     string
		job, cap int64
		def      int64
		dst      func(int64)
	}{
		{"timeoutMs", int64(job.TimeoutMs), int64(caps.TimeoutMs), int64(l.TimeoutMs), func(v int64) { l.TimeoutMs = int(v) }},
		{"memoryLimitBytes", job.MemoryLimitBytes, caps.MemoryLimitBytes, l.MemoryLimitBytes, func(v int64) { l.MemoryLimitBytes = v }},
		{"maxOutputBytes", int64(job.MaxOutputBytes), int64(caps.MaxOutputBytes), int64(l.MaxOutputBytes), func(v int64) { l.MaxOutputBytes = int(v) }},
		{"maxSnapshotBytes", int64(job.MaxSnapshotBytes), int64(caps.MaxSnapshotBytes), int64(l.MaxSnapshotBytes), func(v int64) { l.MaxSnapshotBytes = int(v) }},
		{"maxPendingToolCalls", int64(job.MaxPendingToolCalls), int64(caps.MaxPendingToolCalls), int64(l.MaxPendingToolCalls), func(v int64) { l.MaxPendingToolCalls = int(v) }},
		{"searchDefaultLimit", int64(job.SearchDefaultLimit), int64(caps.SearchDefaultLimit), int64(l.SearchDefaultLimit), func(v int64) { l.SearchDefaultLimit = int(v) }},
		{"maxSearchLimit", int64(job.MaxSearchLimit), int64(caps.MaxSearchLimit), int64(l.MaxSearchLimit), func(v int64) { l.MaxSearchLimit = int(v) }},
		{"maxOutputItems", int64(job.MaxOutputItems), int64(caps.MaxOutputItems), int64(l.MaxOutputItems), func(v int64) { l.MaxOutputItems = int(v) }},
		{"maxTotalCpuMs", int64(job.MaxTotalCPUMs), int64(caps.MaxTotalCPUMs), int64(l.MaxTotalCPUMs), func(v int64) { l.MaxTotalCPUMs = int(v) }},
	}
	for _, f := range fields {
		if f.job < 0 {
			return l, contracts.Errorf(contracts.CodeInvalidInput, "limits.%s must not be negative", f.name)
		}
		if f.job == 0 {
			continue
		}
		limit := f.cap
		if limit == 0 {
			limit = f.def
		}
		if limit > 0 && f.job > limit {
			return l, contracts.Errorf(contracts.CodeInvalidInput, "limits.%s %d exceeds this worker's maximum %d", f.name, f.job, limit)
		}
		f.dst(f.job)
	}
	return l, nil
}

func fillLimits(l, d sandbox.Limits) sandbox.Limits {
	if l.TimeoutMs == 0 {
		l.TimeoutMs = d.TimeoutMs
	}
	if l.MemoryLimitBytes == 0 {
		l.MemoryLimitBytes = d.MemoryLimitBytes
	}
	if l.MaxOutputBytes == 0 {
		l.MaxOutputBytes = d.MaxOutputBytes
	}
	if l.MaxSnapshotBytes == 0 {
		l.MaxSnapshotBytes = d.MaxSnapshotBytes
	}
	if l.MaxPendingToolCalls == 0 {
		l.MaxPendingToolCalls = d.MaxPendingToolCalls
	}
	if l.SearchDefaultLimit == 0 {
		l.SearchDefaultLimit = d.SearchDefaultLimit
	}
	if l.MaxSearchLimit == 0 {
		l.MaxSearchLimit = d.MaxSearchLimit
	}
	if l.MaxOutputItems == 0 {
		l.MaxOutputItems = d.MaxOutputItems
	}
	if l.MaxTotalCPUMs == 0 {
		l.MaxTotalCPUMs = d.MaxTotalCPUMs
	}
	return l
}
