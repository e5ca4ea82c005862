package codemode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/worker"
)

// bridge is the host side of one slice of a run (an exec or a resume):
// search and describe over the run's catalog, and calls that become
// pending nested jobs.
type bridge struct {
	sandbox.CatalogBridge
	refs        map[string]catalogRef
	restartSafe bool

	// replay answers calls from a restartSafe run's history by call id.
	replay map[string]callResult
}

func (b *bridge) Call(_ context.Context, call sandbox.ToolCall) (sandbox.CallOutcome, error) {
	ref, ok := b.refs[call.Tool.ID]
	if !ok {
		return sandbox.CallOutcome{}, fmt.Errorf("unknown tool %q", call.Tool.ID)
	}
	if b.restartSafe && ref.SideEffects {
		return sandbox.CallOutcome{}, fmt.Errorf("%s: %s", call.Tool.ID, msgRestartUnsafe)
	}
	if r, ok := b.replay[call.CallID]; ok {
		return sandbox.CallOutcome{Value: r.Value, Error: r.Error}, nil
	}
	return sandbox.CallOutcome{Pending: true}, nil
}

// catalogWait bounds how long an exec waits for its worker's catalog mirror
// to reach the requester's last registration.
const catalogWait = 2 * time.Second

func decodeExecInput(raw json.RawMessage) (*ExecInput, error) {
	var in ExecInput
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "code_mode.exec needs an input {code, language}")
	}
	if err := dec.Decode(&in); err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "code_mode.exec input: %v", err)
	}
	for _, id := range in.Tools {
		if id == "" || len(id) > contracts.MaxCatalogIDBytes {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "tools: ids must be non-empty catalog ids")
		}
	}
	if in.Tools == nil && bytes.Contains(raw, []byte(`"tools"`)) {
		in.Tools = []string{} // an explicit empty list allows nothing
	}
	return &in, nil
}

func (c *CodeMode) ttl(in *ExecInput) (time.Duration, error) {
	if in.Limits == nil || in.Limits.SnapshotTTLSeconds == 0 {
		return c.cfg.SnapshotTTL, nil
	}
	d := time.Duration(in.Limits.SnapshotTTLSeconds) * time.Second
	if d < time.Second || d > c.cfg.MaxSnapshotTTL {
		return 0, contracts.Errorf(contracts.CodeInvalidInput, "limits.snapshotTtlSeconds %d out of range [1, %d]", in.Limits.SnapshotTTLSeconds, int64(c.cfg.MaxSnapshotTTL/time.Second))
	}
	return d, nil
}

// handleExec runs a code_mode.exec job: it ends completed, failed, or
// parked as waiting with the run suspended in NATS.
func (c *CodeMode) handleExec(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
	in, err := decodeExecInput(job.Input)
	if err != nil {
		return nil, worker.Permanent(err)
	}
	var jl *sandbox.Limits
	if in.Limits != nil {
		jl = &in.Limits.CodeModeLimits
	}
	limits, err := c.cfg.effectiveLimits(jl)
	if err != nil {
		return nil, worker.Permanent(err)
	}
	ttl, err := c.ttl(in)
	if err != nil {
		return nil, worker.Permanent(err)
	}
	runID := job.ID
	// A redelivery of an exec that already suspended: finish what the
	// crashed attempt left (nested jobs not yet submitted) and answer again.
	// A first delivery does not look: its run is new unless the same job
	// was submitted again past the duplicate window, and then the record's
	// first write (which expects no record) finds it.
	if worker.Attempt(ctx) != 1 {
		if ans, found, err := c.existingRun(ctx, job); found {
			return ans, err
		}
	}

	if v := worker.Header(ctx, contracts.HeaderCatalogSeq); v != "" {
		// The requester registered client tools just before: the run's
		// catalog is built once this worker's mirror has them (bounded; a
		// bad or future sequence only costs this wait).
		if seq, err := strconv.ParseUint(v, 10, 64); err == nil && !c.catalog.waitApplied(ctx, seq, catalogWait) {
			c.log.Warn("catalog mirror behind the requester's registration", slog.String("run", job.ID), slog.Uint64("seq", seq))
		}
	}
	rc := c.catalog.forRun(job.Tenant, c.cfg.Allow, c.cfg.Deny, in.Tools, c.cfg.ShellExec)
	out, err := c.cfg.Engine.Exec(ctx, &sandbox.ExecRequest{
		Input:   sandbox.Input{Code: in.Code, Command: in.Command, Language: in.Language},
		Catalog: rc.tools, Bridge: &bridge{refs: rc.refs, restartSafe: in.RestartSafe},
		Limits: limits, RunID: runID, Session: bindSession(job.Tenant, job.Session), Scope: job.Tenant,
	})
	if err != nil {
		return nil, err // the job's context ended: the worker reports it
	}
	res := c.bound(&out.Result)
	if res.Status != sandbox.StatusWaiting {
		return finalAnswer(res)
	}
	if err := c.checkSuspendedCap(ctx, job.Tenant, job.Session); err != nil {
		return nil, err
	}
	now := time.Now()
	rec := &record{
		RunID: runID, Session: job.Session, Tenant: job.Tenant, Priority: runPriority(job.Priority), ExecJob: job.ID, Status: runWaiting, Reason: res.Reason,
		AutoResume: in.AutoResume, RestartSafe: in.RestartSafe, Limits: limits,
		TTLSeconds: int64(ttl / time.Second), Waits: 1, SuspendedAt: now, ExpiresAt: now.Add(ttl),
		TraceParent: worker.TraceParent(ctx), Catalog: rc.refs,
	}
	if rec.Pending, err = pendingOf(runID, res, rc.refs); err != nil {
		return nil, err
	}
	if in.RestartSafe {
		rec.Code, rec.Language = in.Code, in.Language
		if rec.Code == "" {
			rec.Code = in.Command
		}
	}
	if len(out.Snapshot) > c.cfg.InlineSnapshotBytes && worker.Attempt(ctx) == 1 {
		// The snapshot goes to the object store under the run's name: look
		// for a run of this id first, whose snapshot it would replace.
		if ans, found, err := c.existingRun(ctx, job); found {
			return ans, err
		}
	}
	if err := c.store.putSnapshot(ctx, rec, out.Snapshot); err != nil {
		return nil, err
	}
	// Snapshot, then record, then nested jobs, then the waiting event (the
	// worker writes it when this handler parks the job).
	rev, err := c.store.save(ctx, rec, 0)
	if errors.Is(err, errStale) {
		// A record of this run exists: the job was delivered before.
		if ans, found, err := c.existingRun(ctx, job); found {
			return ans, err
		}
	}
	if err != nil {
		return nil, err
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
	c.log.Debug("code mode run suspended", slog.String("run", runID), slog.Int("pending", len(rec.Pending)), slog.Int("snapshot_bytes", rec.SnapshotBytes))
	return c.waitingAnswer(rec, res)
}

// existingRun answers an exec job whose run already has a record: it
// submits what a crashed attempt left unsubmitted and answers as that run
// stands. found is false when there is no record.
func (c *CodeMode) existingRun(ctx context.Context, job *contracts.Job) (ans json.RawMessage, found bool, err error) {
	rec, rev, err := c.store.load(ctx, job.Tenant, job.Session, job.ID)
	if errors.Is(err, errNoRun) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, err
	}
	if !rec.ended() {
		if _, err := c.submitPending(ctx, rec, rev); err != nil {
			return nil, true, err
		}
		if err := c.triggerYield(ctx, rec); err != nil {
			return nil, true, err
		}
	}
	if rec.Final != nil {
		ans, err = finalAnswer(rec.Final)
		return ans, true, err
	}
	ans, err = c.waitingAnswer(rec, nil)
	return ans, true, err
}

func finalAnswer(res *sandbox.Result) (json.RawMessage, error) {
	if res.Status == sandbox.StatusFailed {
		return nil, failedResult(res)
	}
	return json.Marshal(res)
}

// waitingAnswer is the waiting CodeModeResult of a suspended run, parking
// the exec job.
func (c *CodeMode) waitingAnswer(rec *record, res *sandbox.Result) (json.RawMessage, error) {
	if res == nil {
		res = &sandbox.Result{Status: sandbox.StatusWaiting, RunID: rec.RunID, Reason: rec.Reason}
		for _, p := range rec.Pending {
			res.PendingToolCalls = append(res.PendingToolCalls, sandbox.PendingToolCall{CallID: p.CallID, ToolID: p.ToolID, Source: p.Source, Input: p.Input})
		}
	}
	clientTokens(res, rec)
	res.Telemetry.SnapshotBytes = rec.SnapshotBytes
	data, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	return data, worker.Park(contracts.StatusWaiting, rec.Waits)
}

// pendingOf records the pending calls of a waiting result, each with a
// fresh token that its result must echo.
func pendingOf(runID string, res *sandbox.Result, refs map[string]catalogRef) ([]pendingCall, error) {
	out := make([]pendingCall, 0, len(res.PendingToolCalls))
	for _, p := range res.PendingToolCalls {
		token, err := contracts.NewCallToken()
		if err != nil {
			return nil, err
		}
		pc := pendingCall{CallID: p.CallID, ToolID: p.ToolID, Source: p.Source, Input: p.Input, Token: token}
		if isClient(&pc, refs) {
			pc.Submitted = true // the requester runs client tools
		} else {
			pc.JobID = nestedJobID(runID, p.CallID)
		}
		out = append(out, pc)
	}
	return out, nil
}

func isClient(p *pendingCall, refs map[string]catalogRef) bool {
	return refs[p.ToolID].Source == contracts.SourceClient || p.Source == sandbox.SourceClient
}

// clientTokens gives the client calls of a waiting result their tokens:
// the requester answers them and must echo the token. The tokens of calls
// that workers run stay on the bus (nested jobs, run records).
func clientTokens(res *sandbox.Result, rec *record) {
	for i := range res.PendingToolCalls {
		pc := &res.PendingToolCalls[i]
		if p := rec.pending(pc.CallID); p != nil && isClient(p, rec.Catalog) {
			pc.Token = p.Token
		}
	}
}

// runPriority is the level a run keeps: its exec job's, "" for normal.
func runPriority(p contracts.Priority) contracts.Priority {
	if p == contracts.PriorityNormal {
		return ""
	}
	return p
}

// submitPending enqueues the nested jobs of pending calls not yet
// submitted, then records that they are. Job ids are deterministic, so a
// repeat after a crash does not enqueue twice.
func (c *CodeMode) submitPending(ctx context.Context, rec *record, rev uint64) (uint64, error) {
	todo := false
	for _, p := range rec.Pending {
		if !p.Submitted {
			todo = true
		}
	}
	if !todo {
		return rev, nil
	}
	for _, p := range rec.Pending {
		if p.Submitted {
			continue
		}
		ref := rec.Catalog[p.ToolID]
		nj := &contracts.Job{
			ID: p.JobID, Tool: ref.Tool, Session: rec.Session, Input: p.Input, CreatedAt: time.Now().UTC(),
			Parent: &contracts.Parent{RunID: rec.RunID, CallID: p.CallID, Tool: contracts.ToolCodeModeResult, Token: p.Token},
		}
		if !contracts.Guarded(ref.Tool) {
			nj.Priority = rec.Priority // a guarded tool has its normal subject only
		}
		// A duplicate is this call submitted before a crash: it stands.
		if err := c.submitJob(ctx, rec.Tenant, nj, callTrace(ctx, rec)); err != nil {
			return rev, fmt.Errorf("codemode: submit nested call %s: %w", p.CallID, err)
		}
	}
	// Record that they are submitted. Results of the calls just submitted
	// may already be changing the record: on a conflict, mark them on the
	// newer record instead — unless the run has moved on (a resume took it:
	// its calls are all back, and that resume's write must not lose to
	// this one).
	submitted := map[string]bool{}
	for _, p := range rec.Pending {
		submitted[p.CallID] = true
	}
	for range 20 {
		todo := false
		for i := range rec.Pending {
			if submitted[rec.Pending[i].CallID] && !rec.Pending[i].Submitted {
				rec.Pending[i].Submitted, todo = true, true
			}
		}
		if !todo || rec.Status != runWaiting {
			return rev, nil
		}
		next, err := c.store.save(ctx, rec, rev)
		if !errors.Is(err, errStale) {
			return next, err
		}
		fresh, freshRev, err := c.store.load(ctx, rec.Tenant, rec.Session, rec.RunID)
		if errors.Is(err, errNoRun) {
			return rev, nil // the run ended
		}
		if err != nil {
			return rev, err
		}
		*rec, rev = *fresh, freshRev
	}
	return rev, errStale
}
