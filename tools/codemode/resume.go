package codemode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/worker"
)

// errBusy: another worker holds the run's lease.
var errBusy = errors.New("codemode: run is being resumed elsewhere")

// resume takes the run's lease, restores its VM from the snapshot, settles
// its calls in the order their results arrived, and records what follows:
// waiting again (new snapshot, new nested jobs, a waiting event on the exec
// job) or the end (completed / failed event, record and snapshot removed).
// It returns the CodeModeResult. waitJob, when set, is the code_mode.wait
// job this resume answers; its claim is released in the same write.
func (c *CodeMode) resume(ctx context.Context, rec *record, rev uint64, waitJob string) (*sandbox.Result, error) {
	if !c.w.Tracing() {
		return c.resumeRun(ctx, rec, rev, waitJob)
	}
	// The resume is a span of the run's trace, a child of the exec job's
	// span, linked to the job that triggered it (a nested call's report, a
	// wait); the suspension it ends is one too. The nested calls it makes
	// are children of the resume.
	attrs := []slog.Attr{
		slog.String(attrRunID, rec.RunID), slog.String(worker.AttrSession, rec.Session), slog.Int(attrStep, rec.Waits),
	}
	if rec.Tenant != "" {
		attrs = append(attrs, slog.String(worker.AttrTenant, rec.Tenant))
	}
	var links []string
	if tp := worker.TraceParent(ctx); tp != "" {
		links = []string{tp}
	}
	if !rec.Lease.heldBy("", time.Now()) {
		c.w.StartSpan(worker.SpanStart{Name: "code_mode.suspended", Parent: rec.TraceParent, Start: rec.SuspendedAt, Attrs: attrs}).End("resumed", "")
	}
	sp := c.w.StartSpan(worker.SpanStart{Name: "code_mode.resume", Parent: rec.TraceParent, Links: links, Attrs: attrs})
	res, err := c.resumeRun(context.WithValue(ctx, callTraceKey{}, sp.TraceParent()), rec, rev, waitJob)
	switch {
	case errors.Is(err, errBusy):
		sp.End("busy", "")
	case err != nil:
		sp.End("error", contracts.AsError(err).Code)
	case res.Status == sandbox.StatusFailed:
		sp.End(string(res.Status), res.Code)
	default:
		sp.End(string(res.Status), "")
	}
	return res, err
}

// Attribute keys of code mode's spans.
const (
	attrRunID = "toolq.code_mode.run_id"
	attrStep  = "toolq.code_mode.step"
)

// callTraceKey carries the traceparent of the resume's span, under which
// the resume submits its calls.
type callTraceKey struct{}

// callTrace is the traceparent the run's calls are submitted with: the
// resume's span when tracing, else the exec job's.
func callTrace(ctx context.Context, rec *record) string {
	if tp, _ := ctx.Value(callTraceKey{}).(string); tp != "" {
		return tp
	}
	return rec.TraceParent
}

func (c *CodeMode) resumeRun(ctx context.Context, rec *record, rev uint64, waitJob string) (*sandbox.Result, error) {
	now := time.Now()
	if rec.Lease.heldBy("", now) {
		return nil, errBusy
	}
	token := nuid.Next()
	rec.Lease = &lease{Owner: c.w.Name(), Until: now.Add(c.cfg.LeaseTTL), Token: token}
	rec.Status = runResuming
	// The lease is written while the snapshot is decoded and the guest
	// runs: the guest's slice has no effect outside this process (its calls
	// are only recorded as pending), and nothing of it is written, submitted
	// or reported before the lease is known to be this resume's. A resume
	// that loses the lease throws its slice away.
	leased := c.store.saveBegin(ctx, rec, rev)
	defer func() { _, _ = leased.wait() }()
	settle := make([]sandbox.Settlement, 0, len(rec.Results))
	for _, r := range rec.Results {
		if rec.pending(r.CallID) != nil {
			settle = append(settle, sandbox.Settlement{CallID: r.CallID, Value: r.Value, Error: r.Error})
			if rec.RestartSafe {
				rec.History = append(rec.History, r)
			}
		}
	}
	suspended := float64(now.Sub(rec.SuspendedAt).Microseconds()) / 1000
	var out *sandbox.Outcome
	replayed := false
	snap, err := c.store.getSnapshot(ctx, rec)
	if err == nil {
		out, err = c.cfg.Engine.Resume(ctx, &sandbox.ResumeRequest{
			Snapshot: snap, Settlements: settle,
			Bridge: &bridge{refs: rec.Catalog, restartSafe: rec.RestartSafe}, Limits: rec.Limits,
			// The snapshot must be this run's, of this tenant's session, at this step.
			RunID: rec.RunID, Session: bindSession(rec.Tenant, rec.Session), Step: rec.Waits,
		})
		if err == nil && snapshotRefused(&out.Result) {
			err = fmt.Errorf("%s", out.Result.Error)
		} else if err != nil && ctx.Err() == nil {
			err = fmt.Errorf("resume: %w", err)
		}
	}
	rev, lerr := leased.wait()
	if lerr != nil {
		return nil, lerr
	}
	if err != nil && ctx.Err() == nil {
		// The snapshot is gone or unusable (another engine build, damage).
		if !rec.RestartSafe {
			res := &sandbox.Result{Status: sandbox.StatusFailed, Code: contracts.CodeInternalError, Error: "code mode run cannot be resumed: " + err.Error()}
			return res, c.finish(ctx, rec, rev, res)
		}
		c.log.Warn("rebuilding a restartSafe run by replay", slog.String("run", rec.RunID), slog.Any("cause", err))
		out, err = c.replay(ctx, rec)
		replayed = true
	}
	if err != nil {
		// The job's context ended mid-resume: give the lease back so the
		// next trigger does not wait for it to expire.
		rec.Status, rec.Lease = runWaiting, nil
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = c.store.save(bg, rec, rev)
		return nil, err
	}
	if c.cfg.Observer != nil {
		c.cfg.Observer.Resumed(replayed)
	}
	res := c.bound(&out.Result)
	rec.SuspendedMs += suspended
	res.Telemetry.SuspendedMs = rec.SuspendedMs
	if waitJob != "" && rec.Wait != nil && rec.Wait.Owner == waitJob {
		rec.Wait = nil
	}
	if res.Status != sandbox.StatusWaiting {
		return res, c.finish(ctx, rec, rev, res)
	}
	old := rec.SnapshotObject
	rec.Status, rec.Reason, rec.Lease = runWaiting, res.Reason, nil
	if rec.Pending, err = pendingOf(rec.RunID, res, rec.Catalog); err != nil {
		return nil, err
	}
	rec.Results = nil
	rec.Waits++
	rec.SuspendedAt = time.Now()
	rec.ExpiresAt = rec.SuspendedAt.Add(time.Duration(rec.TTLSeconds) * time.Second)
	if err := c.store.putSnapshot(ctx, rec, out.Snapshot); err != nil {
		return nil, err
	}
	if rev, err = c.saveLeased(ctx, rec, rev, token, waitJob); err != nil {
		return nil, err
	}
	if old != "" && old != rec.SnapshotObject {
		c.store.dropSnapshot(ctx, old)
	}
	if _, err := c.submitPending(ctx, rec, rev); err != nil {
		return nil, err
	}
	if err := c.triggerYield(ctx, rec); err != nil {
		return nil, err
	}
	if c.cfg.Observer != nil {
		c.cfg.Observer.Suspended(rec.SnapshotBytes)
	}
	res.Telemetry.SnapshotBytes = rec.SnapshotBytes
	clientTokens(res, rec)
	data, _ := json.Marshal(res)
	if err := c.w.Emit(ctx, c.execRef(rec), contracts.StatusWaiting, rec.Waits, data, nil); err != nil && !errors.Is(err, worker.ErrJobEnded) {
		c.log.Warn("waiting event not written", slog.String("run", rec.RunID), slog.Any("err", err))
	}
	return res, nil
}

// errLeaseLost: the run's lease passed to another resume (it expired)
// while this one ran; that resume's outcome stands.
var errLeaseLost = errors.New("codemode: the run's resume lease was taken over")

// saveLeased writes the record a resume ends with. Other writers may have
// changed the record meanwhile without taking the run — a nested call's
// submit marking its calls submitted, a wait claiming the run, a duplicate
// result: on a conflict it reloads, keeps their wait claim and writes again
// as long as this resume (its lease token) still holds the lease.
func (c *CodeMode) saveLeased(ctx context.Context, rec *record, rev uint64, token, waitJob string) (uint64, error) {
	for range 20 {
		next, err := c.store.save(ctx, rec, rev)
		if !errors.Is(err, errStale) {
			return next, err
		}
		fresh, freshRev, err := c.store.load(ctx, rec.Tenant, rec.Session, rec.RunID)
		if err != nil {
			return 0, err
		}
		if fresh.Status != runResuming || fresh.Lease == nil || fresh.Lease.Token != token {
			return 0, errLeaseLost
		}
		rec.Wait = fresh.Wait
		if waitJob != "" && rec.Wait != nil && rec.Wait.Owner == waitJob {
			rec.Wait = nil
		}
		rev = freshRev
	}
	return 0, errStale
}

// yieldTrigger is the call id of the code_mode.result job that resumes an
// autoResume run suspended at step n by yield_control() alone: no nested
// call will come back to wake it.
func yieldTrigger(n int) string { return fmt.Sprintf("yield-step-%d", n) }

// triggerYield enqueues that job for a run that waits only on yields, on
// the run's tenant's subject. Its id is deterministic, so a repeat enqueues
// it once. It carries no token: it records nothing, and resumes only a run
// that may resume at any moment anyway.
func (c *CodeMode) triggerYield(ctx context.Context, rec *record) error {
	if !rec.AutoResume || len(rec.Pending) > 0 || rec.ended() {
		return nil
	}
	callID := yieldTrigger(rec.Waits)
	input, err := json.Marshal(contracts.ToolResult{RunID: rec.RunID, CallID: callID, Status: contracts.StatusCompleted})
	if err != nil {
		return err
	}
	job := &contracts.Job{
		ID: contracts.ToolResultJobID(nestedJobID(rec.RunID, callID)), Tool: contracts.ToolCodeModeResult,
		Session: rec.Session, Input: input, CreatedAt: time.Now().UTC(),
	}
	if err := c.submitJob(ctx, rec.Tenant, job, callTrace(ctx, rec)); err != nil {
		return fmt.Errorf("codemode: resume trigger of %s: %w", rec.RunID, err)
	}
	return nil
}

// replay rebuilds a restartSafe run from its code: every call it made is
// answered at once from the recorded results, so the guest reaches the same
// point and goes on from there.
func (c *CodeMode) replay(ctx context.Context, rec *record) (*sandbox.Outcome, error) {
	answers := make(map[string]callResult, len(rec.History))
	for _, r := range rec.History {
		answers[r.CallID] = r
	}
	tools := make([]sandbox.Tool, 0, len(rec.Catalog))
	for id := range rec.Catalog {
		if t, ok := c.catalog.lookup(rec.Tenant, id); ok {
			tools = append(tools, toSandbox(t))
		}
	}
	out, err := c.cfg.Engine.Exec(ctx, &sandbox.ExecRequest{
		Input:   sandbox.Input{Code: rec.Code, Language: rec.Language},
		Catalog: tools, Limits: rec.Limits, RunID: rec.RunID, Session: bindSession(rec.Tenant, rec.Session), Step: rec.Waits + 1, Scope: rec.Tenant,
		Bridge: &bridge{refs: rec.Catalog, restartSafe: true, replay: answers},
	})
	if err != nil {
		return nil, err
	}
	out.Result.Telemetry.Resumes = rec.Waits
	return out, nil
}

// snapshotRefused reports a resume that failed because the sandbox would not
// restore the snapshot (bad signature, other wasm build, truncated).
func snapshotRefused(res *sandbox.Result) bool {
	return res.Status == sandbox.StatusFailed && res.Code == contracts.CodeInternalError &&
		(strings.HasPrefix(res.Error, "code mode snapshot refused") || strings.HasPrefix(res.Error, "restore code mode snapshot"))
}

func (c *CodeMode) execRef(rec *record) *contracts.Job {
	return &contracts.Job{ID: rec.ExecJob, Session: rec.Session, Tool: contracts.ToolCodeModeExec, Tenant: rec.Tenant}
}

// finish ends a run: the exec job's terminal event, then the record and
// the snapshot go.
func (c *CodeMode) finish(ctx context.Context, rec *record, rev uint64, res *sandbox.Result) error {
	var err error
	if res.Status == sandbox.StatusFailed {
		err = c.w.Emit(ctx, c.execRef(rec), contracts.StatusFailed, 1, nil, failedError(res))
	} else {
		data, _ := json.Marshal(res)
		err = c.w.Emit(ctx, c.execRef(rec), contracts.StatusCompleted, 1, data, nil)
	}
	if err != nil && !errors.Is(err, worker.ErrJobEnded) {
		return err
	}
	c.drop(ctx, rec)
	return nil
}

// drop removes a run's record and snapshot.
func (c *CodeMode) drop(ctx context.Context, rec *record) {
	c.store.dropSnapshot(ctx, rec.SnapshotObject)
	key := runKey(rec.Tenant, rec.Session, rec.RunID)
	c.store.recent.drop(key)
	c.store.due.stop(key)
	if err := c.store.kv.Purge(ctx, key, jetstream.PurgeTTL(time.Second)); err != nil {
		c.log.Warn("run record not removed", slog.String("run", rec.RunID), slog.Any("err", err))
	}
}
