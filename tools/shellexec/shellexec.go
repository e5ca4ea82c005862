package shellexec

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
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/worker"
)

// ShellExec runs exec and exec.decide jobs on a worker.
type ShellExec struct {
	w      *worker.Worker
	nc     *nats.Conn
	js     jetstream.JetStream
	cfg    Config
	log    *slog.Logger
	runner *shell.Runner

	store    *store
	policyKV jetstream.KeyValue
	cancels  jetstream.KeyValue
	events   jetstream.Stream

	tenantsMu sync.Mutex
	tenants   jetstream.KeyValue // the tenants bucket, once found

	life   *lifecycle.Service
	lctx   context.Context // the loops' and background sessions' lifetime
	cancel context.CancelFunc
	loops  sync.WaitGroup

	mu       sync.Mutex
	running  map[string]context.CancelCauseFunc // by the contracts.CancelKey a cancel names
	sessions int                                // background sessions running
}

// Causes of a run's context ending early.
var (
	// errJobCancelled: the run's job was cancelled; the run writes its
	// cancelled end unless the canceller's came first.
	errJobCancelled = errors.New("shellexec: job cancelled")
	// errExecEnded: the exec job that started a background session ended
	// (cancelled) before it could tell of the session.
	errExecEnded = errors.New("shellexec: exec job ended")
)

// Register adds exec and exec.decide to w, makes the exec tool one of w's
// extensions (the worker starts it before it pulls a job and stops it after
// its jobs drained) and follows the worker's cancel feed.
func Register(w *worker.Worker, nc *nats.Conn, cfg *Config) (*ShellExec, error) {
	if w == nil || nc == nil {
		return nil, errors.New("shellexec: nil worker or connection")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	rc := c.Runner
	rc.AllowWorkerHost = c.Policy.AllowWorkerHost // the worker host only when its policy allows it
	runner, err := shell.NewRunner(&rc)
	if err != nil {
		return nil, fmt.Errorf("shellexec: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s := &ShellExec{
		w: w, nc: nc, js: js, cfg: c, runner: runner,
		log:     c.Logger.With(slog.String("worker", w.Name())),
		running: map[string]context.CancelCauseFunc{},
	}
	s.life = lifecycle.New(&lifecycle.Config{Start: s.start, Stop: s.stop, ErrStarted: errors.New("shellexec: already started")})
	long := contracts.MaxJobTimeout + 5*time.Minute
	// exec runs at most once: a command may have side effects, so a job
	// whose worker died is failed (DLQ), never run a second time.
	if err := w.Register(ToolExec, worker.HandlerFunc(s.handleExec), &worker.ToolConfig{
		Timeout: long, Retry: worker.RetryPolicy{MaxAttempts: 1},
		// Code-mode runs may call it (the code-mode contract: by catalog id, when the
		// policy allows); a call that needs approval parks the run until a
		// person decides. Refused in restartSafe runs.
		Catalog: &contracts.CatalogTool{
			Label:       "Shell exec",
			Description: "Run a shell command under the worker's exec policy; commands off the allowlist wait for a person's approval.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"},"workdir":{"type":"string"},"env":{"type":"object","additionalProperties":{"type":"string"}},"timeout":{"type":"integer","minimum":1}},"required":["command"]}`),
			SideEffects: true,
		},
	}); err != nil {
		return nil, err
	}
	// A worker that trusts no approver would refuse every decision it
	// took ("unknown approver"), though another worker could accept it:
	// decisions are left to the workers that have approvers, and to the
	// workers serving tenants, whose approvers are in the tenants' records
	// (a default-tenant decision such a worker cannot verify is handed
	// back for another worker).
	if len(c.Approvers) > 0 || c.Tenants {
		if err := w.Register(ToolDecide, worker.HandlerFunc(s.handleDecide), &worker.ToolConfig{
			NormalOnly: true, // the approvers' deny rules name toolq.jobs.exec.decide
			Timeout:    long, Concurrency: 64,
			Retry: worker.RetryPolicy{MaxAttempts: 10, InitialInterval: 200 * time.Millisecond, MaxInterval: 5 * time.Second},
		}); err != nil {
			return nil, err
		}
	} else {
		c.Logger.Warn("exec: no approvers configured; this worker takes no exec.decide jobs, so commands that need approval wait for a worker that has approvers")
	}
	if err := w.OnCancel(s.onCancel); err != nil {
		return nil, err
	}
	if err := w.Use(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Start creates the approvals and policy buckets and starts following
// approval expiries. The worker calls it (Register made the exec tool its
// extension) before it pulls a job. A missing bubblewrap is logged, not
// fatal: sandboxed jobs then fail closed with runtime_unavailable.
func (s *ShellExec) Start(ctx context.Context) error { return s.life.Start(ctx) }

// Stop kills background sessions and ends the background loops; the worker
// calls it after its jobs drained (approved commands run inside exec.decide
// jobs, which the worker's Stop drains or hands back). A second Stop waits
// for the first; Stop before Start is harmless.
func (s *ShellExec) Stop(ctx context.Context) error { return s.life.Stop(ctx) }

// Stopped is closed while the exec tool is not running: once Stop has
// finished, every background session has ended.
func (s *ShellExec) Stopped() <-chan struct{} { return s.life.Stopped() }

func (s *ShellExec) start(ctx context.Context) error {
	sub := s.cfg.Subjects
	if err := bus.Ensure(ctx, s.js, bus.Config{Subjects: sub, Replicas: s.cfg.Replicas, Storage: s.cfg.Storage}); err != nil {
		return err
	}
	bounds := bus.Config{Subjects: sub, MaxBytes: s.cfg.MaxBytes}
	approvals, err := bus.EnsureKV(ctx, s.js, jetstream.KeyValueConfig{
		Bucket:      sub.ApprovalsBucket(),
		Description: "exec commands waiting for a person's decision",
		MaxBytes:    bounds.MaxBytesOf(sub.ApprovalsBucket()),
		Storage:     s.cfg.Storage,
		Replicas:    s.cfg.Replicas,
		// Expiry markers outlive a fleet restart, so a worker that comes
		// back still denies what expired meanwhile.
		LimitMarkerTTL: s.cfg.DecidedTTL,
	})
	if err != nil {
		return err
	}
	s.store = &store{js: s.js, kv: approvals, subj: contracts.KVSubject(sub.ApprovalsBucket(), "")}
	if s.policyKV, err = bus.EnsureKV(ctx, s.js, jetstream.KeyValueConfig{
		Bucket:      sub.ExecPolicyBucket(),
		Description: "shared exec policy: allowlist entries and stricter modes for every worker",
		MaxBytes:    bounds.MaxBytesOf(sub.ExecPolicyBucket()),
		Storage:     s.cfg.Storage,
		Replicas:    s.cfg.Replicas,
		History:     16,
	}); err != nil {
		return err
	}
	if s.cancels, err = s.js.KeyValue(ctx, sub.CancelsBucket()); err != nil {
		return fmt.Errorf("shellexec: cancels bucket: %w", err)
	}
	if s.events, err = s.js.Stream(ctx, sub.EventsStream()); err != nil {
		return fmt.Errorf("shellexec: events stream: %w", err)
	}
	if err := s.runner.Probe(ctx); err != nil {
		s.log.Warn("exec sandbox unavailable: host=sandbox jobs will fail with runtime_unavailable", slog.Any("err", err))
	}
	s.lctx, s.cancel = context.WithCancel(context.Background())
	if err := s.startExpiry(ctx); err != nil {
		_ = s.stop(ctx)
		return err
	}
	s.startPendingScan() //nolint:contextcheck // the scan loop lives until Stop and uses the loops' context (s.lctx), not Start's
	return nil
}

// stop ends the loops and background sessions and waits for them.
func (s *ShellExec) stop(context.Context) error {
	s.cancel()
	s.loops.Wait()
	return nil
}

// track registers a run that a cancel of tenant's jobID in session ends.
// It checks the cancels bucket once after registering, so a cancel
// recorded just before is not missed by the watch.
func (s *ShellExec) track(ctx context.Context, tenant, session, jobID string, cancel context.CancelCauseFunc) (untrack func()) {
	key := contracts.CancelKey(tenant, session, jobID) // the cancels bucket's key too
	s.mu.Lock()
	s.running[key] = cancel
	s.mu.Unlock()
	if _, err := s.cancels.Get(ctx, key); err == nil {
		cancel(errJobCancelled)
	}
	return func() {
		s.mu.Lock()
		delete(s.running, key)
		s.mu.Unlock()
	}
}

// takeSession reserves a background session slot; false at the cap.
func (s *ShellExec) takeSession() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions >= s.cfg.MaxSessions {
		return false
	}
	s.sessions++
	return true
}

func (s *ShellExec) dropSession() {
	s.mu.Lock()
	s.sessions--
	s.mu.Unlock()
}

// stopRun cancels the tracked run of tenant's jobID in session with
// cause, if there is one.
func (s *ShellExec) stopRun(tenant, session, jobID string, cause error) {
	s.mu.Lock()
	stop := s.running[contracts.CancelKey(tenant, session, jobID)]
	s.mu.Unlock()
	if stop != nil {
		stop(cause)
	}
}

// emit writes an event of a job other than the one being handled; a job
// that already ended is not an error.
func (s *ShellExec) emit(ctx context.Context, ref *contracts.Job, status contracts.Status, n int, v any, werr *contracts.Error) error {
	var raw json.RawMessage
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		raw = b
	}
	return s.w.Emit(ctx, ref, status, n, raw, werr)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func permanent(code contracts.ErrorCode, format string, args ...any) error {
	return worker.Permanent(contracts.Errorf(code, format, args...))
}

func isEnded(err error) bool { return errors.Is(err, worker.ErrJobEnded) }
