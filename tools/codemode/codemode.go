package codemode

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

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/lifecycle"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/worker"
)

// CodeMode runs code_mode.exec, code_mode.wait and code_mode.result jobs on
// a worker: guest code in the sandbox, nested calls as jobs, waiting runs
// suspended in NATS and resumed on whichever worker gets to them.
type CodeMode struct {
	w    *worker.Worker
	nc   *nats.Conn
	js   jetstream.JetStream
	cfg  Config
	log  *slog.Logger
	prod *producer.Producer

	store   *store
	catalog *catalog
	counts  runCounts // recent counts of suspended runs, for the caps

	life   *lifecycle.Service
	cancel context.CancelFunc // ends the loops
	loops  sync.WaitGroup
}

// Register adds code mode's tools to w, makes code mode one of w's
// extensions (the worker starts it before it pulls a job and stops it after
// its jobs drained) and follows the worker's cancel feed.
func Register(w *worker.Worker, nc *nats.Conn, cfg *Config) (*CodeMode, error) {
	if w == nil || nc == nil {
		return nil, errors.New("codemode: nil worker or connection")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	cm := &CodeMode{
		w: w, nc: nc, js: js, cfg: c, log: c.Logger.With(slog.String("worker", w.Name())),
		catalog: &catalog{entries: map[string]catalogEntry{}, clients: map[string]int{}, log: c.Logger},
	}
	cm.life = lifecycle.New(&lifecycle.Config{Start: cm.start, Stop: cm.stop, ErrStarted: errors.New("codemode: already started")})
	long := c.MaxSnapshotTTL + time.Minute
	tools := []struct {
		name string
		h    worker.HandlerFunc
		tc   *worker.ToolConfig
	}{
		// Runs carry the tenant of their exec job's subject: their records,
		// snapshots, nested jobs and events are that tenant's.
		{contracts.ToolCodeModeExec, cm.handleExec, &worker.ToolConfig{Timeout: time.Duration(c.MaxLimits.TimeoutMs+c.Limits.TimeoutMs)*time.Millisecond + time.Minute}},
		{contracts.ToolCodeModeWait, cm.handleWait, &worker.ToolConfig{Timeout: long, Concurrency: 256}},
		{contracts.ToolCodeModeResult, cm.handleResult, &worker.ToolConfig{NormalOnly: true, Retry: worker.RetryPolicy{MaxAttempts: 20, InitialInterval: 100 * time.Millisecond, MaxInterval: 2 * time.Second}}},
	}
	for _, t := range tools {
		if err := w.Register(t.name, t.h, t.tc); err != nil {
			return nil, err
		}
	}
	if err := w.OnCancel(cm.onCancel); err != nil {
		return nil, err
	}
	if err := w.Use(cm); err != nil {
		return nil, err
	}
	return cm, nil
}

// Start creates the runs bucket and the snapshot store, loads the catalog
// and starts following expiries. The worker calls it (Register made code
// mode its extension) before it pulls a job.
func (c *CodeMode) Start(ctx context.Context) error { return c.life.Start(ctx) }

// Stop ends the background loops and closes code mode's producer; the
// worker calls it after its jobs drained. A second Stop waits for the
// first; Stop before Start is harmless.
func (c *CodeMode) Stop(ctx context.Context) error { return c.life.Stop(ctx) }

// Stopped is closed while code mode is not running (see Stop).
func (c *CodeMode) Stopped() <-chan struct{} { return c.life.Stopped() }

func (c *CodeMode) start(ctx context.Context) error {
	s := c.cfg.Subjects
	if err := bus.Ensure(ctx, c.js, bus.Config{Subjects: s, Replicas: c.cfg.Replicas, Storage: c.cfg.Storage}); err != nil {
		return err
	}
	bounds := bus.Config{Subjects: s, MaxBytes: c.cfg.MaxBytes}
	runs, err := bus.EnsureKV(ctx, c.js, jetstream.KeyValueConfig{
		Bucket:         s.RunsBucket(),
		Description:    "code-mode runs waiting on nested calls",
		MaxBytes:       bounds.MaxBytesOf(s.RunsBucket()),
		Storage:        c.cfg.Storage,
		Replicas:       c.cfg.Replicas,
		LimitMarkerTTL: time.Minute,
	})
	if err != nil {
		return err
	}
	obj, err := c.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      s.SnapshotsBucket(),
		Description: "code-mode VM snapshots too large for the run record",
		MaxBytes:    bounds.MaxBytesOf(s.SnapshotsBucket()),
		Storage:     c.cfg.Storage,
		Replicas:    c.cfg.Replicas,
	})
	if err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
		return fmt.Errorf("codemode: snapshot store: %w", err)
	}
	if obj == nil {
		if obj, err = c.js.ObjectStore(ctx, s.SnapshotsBucket()); err != nil {
			return fmt.Errorf("codemode: snapshot store: %w", err)
		}
	}
	// Looked up once: the suspended-runs cap asks this stream on every
	// suspension, and a lookup is a round trip of its own.
	runsStream, err := c.js.Stream(ctx, contracts.KVStream(s.RunsBucket()))
	if err != nil {
		return fmt.Errorf("codemode: runs stream: %w", err)
	}
	c.store = &store{
		js: c.js, kv: runs, runs: runsStream, obj: obj, subj: contracts.KVSubject(s.RunsBucket(), ""),
		limit: c.cfg.InlineSnapshotBytes, leaseTTL: c.cfg.LeaseTTL,
		due: newDueTimers(c.cfg.SweepInterval * 3 / 2),
	}
	// Earlier versions expired runs with a durable consumer of every write
	// of the bucket; the sweep handles what it had left (markers included).
	if err := c.js.DeleteConsumer(ctx, contracts.KVStream(s.RunsBucket()), legacyExpiryConsumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("codemode: remove the old expiry consumer: %w", err)
	}
	catKV, err := c.js.KeyValue(ctx, s.CatalogBucket())
	if err != nil {
		return fmt.Errorf("codemode: catalog: %w", err)
	}
	// A run's nested calls queue like a tenant's (published without the
	// served check): a tool whose workers are restarting is waited for, and
	// one nobody serves ends after the workers' queue-time limit.
	prod, err := producer.New(c.nc, &producer.Config{Subjects: s, Logger: c.cfg.Logger, Name: "codemode-" + c.w.Name(), SubmitUnserved: true})
	if err != nil {
		return err
	}
	c.prod = prod
	lctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.loops.Add(1)
	if err := c.catalog.watch(lctx, catKV, c.loops.Done); err != nil { //nolint:contextcheck // the watch loop lives until Stop, not until Start's ctx ends
		_ = c.stop(ctx)
		return err
	}
	c.loops.Add(1)
	go c.sweep(lctx)      //nolint:contextcheck // the sweep lives until Stop, not until Start's ctx ends
	c.startRunsScan(lctx) //nolint:contextcheck // as the sweep
	return nil
}

// stop ends the loops, waits for them, then closes the producer (a loop
// may still cancel nested jobs with it until then).
func (c *CodeMode) stop(context.Context) error {
	c.cancel()
	c.loops.Wait()
	c.prod.Close()
	return nil
}

// ExecInput is the input of a code_mode.exec job: the code-mode contract's exec input and
// the bus's options.
type ExecInput = contracts.CodeModeExecInput

// Limits are a run's limits as a job gives them.
type Limits = contracts.CodeModeExecLimits

// WaitInput is the input of a code_mode.wait job.
type WaitInput = contracts.CodeModeWaitInput

// Messages of the code-mode contract for waits that cannot proceed.
const (
	msgUnavailable   = "code mode run is unavailable or expired."
	msgOtherSession  = "code mode run belongs to a different session."
	msgWaitInFlight  = "a wait is already in flight for this code mode run."
	msgTooManyRuns   = "too many suspended code mode runs."
	msgRestartUnsafe = "refused in a restartSafe run: the tool has side effects"
)

func invalid(msg string) error {
	return worker.Permanent(contracts.Errorf(contracts.CodeInvalidInput, "%s", msg))
}

func nestedJobID(runID, callID string) string { return contracts.NestedJobID(runID, callID) }

// bound returns res, or when its JSON exceeds MaxResultBytes a failed
// result with output_limit_exceeded that keeps only the telemetry: an event
// larger than a message cannot be written, and retrying would make the same
// result again.
func (c *CodeMode) bound(res *sandbox.Result) *sandbox.Result {
	data, err := json.Marshal(res)
	if err == nil && len(data) <= c.cfg.MaxResultBytes {
		return res
	}
	return &sandbox.Result{
		Status: sandbox.StatusFailed, Code: contracts.CodeOutputLimitExceeded,
		Error:     fmt.Sprintf("code mode result of %d bytes exceeds the limit of %d bytes", len(data), c.cfg.MaxResultBytes),
		Telemetry: res.Telemetry,
	}
}

// failedResult turns a failed CodeModeResult into the job's error. A
// result without a code failed in the guest's own code: guest_error.
func failedResult(res *sandbox.Result) error {
	details, _ := json.Marshal(res)
	code := res.Code
	if code == "" {
		code = contracts.CodeGuestError
	}
	return worker.Permanent(&contracts.Error{Code: code, Message: res.Error, Details: details})
}

func failedError(res *sandbox.Result) *contracts.Error {
	var ce *contracts.Error
	_ = errors.As(failedResult(res), &ce)
	return ce
}

// submitJob enqueues a job of a run (a nested call, a resume trigger) on
// the run's tenant's subject (at the job's level, on its session's lane), so it lands in that tenant's jobs stream:
// deduplicated there, counted against its quota, its events in its
// subspace. A duplicate (submitted before a crash) is not an error.
func (c *CodeMode) submitJob(ctx context.Context, tenant string, job *contracts.Job, traceparent string) error {
	if tenant == "" {
		err := c.prod.SubmitJob(ctx, job, traceparent)
		if errors.Is(err, producer.ErrToolNotServed) && job.Priority != "" && job.Priority != contracts.PriorityNormal {
			// A tool served at normal only (NormalOnly): the call goes at
			// normal rather than nowhere.
			lvl := *job
			lvl.Priority = ""
			err = c.prod.SubmitJob(ctx, &lvl, traceparent)
		}
		if err != nil && !errors.Is(err, producer.ErrDuplicate) {
			return err
		}
		return nil
	}
	if err := job.Validate(); err != nil {
		return err
	}
	data, err := json.Marshal(job)
	if err != nil {
		return err
	}
	// The level and the session's lane, as a producer would choose them.
	msg := &nats.Msg{Subject: c.cfg.Subjects.TenantSessionJob(tenant, job), Data: data}
	if traceparent != "" {
		msg.Header = nats.Header{bus.HeaderTraceParent: []string{traceparent}}
	}
	_, err = c.js.PublishMsg(ctx, msg, jetstream.WithMsgID(contracts.DedupID(job)))
	return err
}

func isEnded(err error) bool { return errors.Is(err, worker.ErrJobEnded) }

// RunInfo describes a suspended run, as `toolq runs` lists it.
type RunInfo struct {
	RunID      string `json:"runId"`
	Session    string `json:"session"`
	Tenant     string `json:"tenant,omitempty"`
	Status     string `json:"status"`
	Reason     string `json:"reason,omitempty"`
	Pending    int    `json:"pending"`
	Results    int    `json:"results"`
	AutoResume bool   `json:"autoResume,omitempty"`
	Snapshot   int    `json:"snapshotBytes"`
	// Waits is how many times the run suspended (its waiting events).
	Waits     int       `json:"waits"`
	Suspended time.Time `json:"suspendedAt"`
	Expires   time.Time `json:"expiresAt"`
}

// ListRuns lists the runs in the runs bucket, of one session of the
// default tenant or of all tenants and sessions (session ""), read straight
// from NATS: no worker needs to be running.
func ListRuns(ctx context.Context, js jetstream.JetStream, subjects contracts.Subjects, session string) ([]RunInfo, error) {
	kv, err := js.KeyValue(ctx, subjects.RunsBucket())
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, nil
		}
		return nil, err
	}
	filter := ">"
	if session != "" {
		if err := contracts.ValidateID("session", session); err != nil {
			return nil, err
		}
		filter = session + ".*"
	}
	lister, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, err
	}
	defer func() { _ = lister.Stop() }()
	var out []RunInfo
	for k := range lister.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var r record
		tenant, _, _, ok := parseRunKey(k)
		if !ok || json.Unmarshal(e.Value(), &r) != nil {
			continue
		}
		out = append(out, RunInfo{
			RunID: r.RunID, Session: r.Session, Tenant: tenant, Status: r.Status, Reason: r.Reason,
			Pending: len(r.Pending), Results: len(r.Results), AutoResume: r.AutoResume,
			Snapshot: r.SnapshotBytes, Waits: r.Waits, Suspended: r.SuspendedAt, Expires: r.ExpiresAt,
		})
	}
	return out, nil
}
