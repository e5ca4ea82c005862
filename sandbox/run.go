package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/sandbox/internal/engine"
	"github.com/toolq/toolq/sandbox/internal/snapshot"
)

const hostFunctionName = "toolq"

// ExecRequest starts a run.
type ExecRequest struct {
	Input Input
	// Catalog is the run's allowed tools.
	Catalog []Tool
	// Bridge serves search, describe and call. Nil: a CatalogBridge whose
	// calls fail.
	Bridge Bridge
	// Limits of the run; zero fields take the engine's defaults.
	Limits Limits
	// RunID names the run in a waiting result and in ToolCalls; empty: a
	// random one.
	RunID string
	// Session and Step are signed into the run's snapshots with RunID:
	// Resume restores a snapshot only as the run, session and step it was
	// made for. Step is the step of the first snapshot (1 when zero); each
	// resume that waits again makes the next.
	Session string
	Step    int
	// Scope is whose runs may share what the engine remembers of a code's
	// loader check (code mode: the run's tenant). A pass is remembered per
	// scope, so how fast one scope's exec is says nothing of the code
	// another scope ran.
	Scope string
}

// ResumeRequest continues a waiting run.
type ResumeRequest struct {
	// Snapshot is the blob of the previous Outcome.
	Snapshot []byte
	// Settlements settle pending calls, applied in order (the order results
	// arrived); calls left out stay pending. Pending yield_control calls are
	// settled first, by every resume.
	Settlements []Settlement
	Bridge      Bridge
	// Limits override the ones saved in the snapshot when non-zero.
	Limits Limits
	// RunID, Session and Step are what the caller restores: they must be
	// those the snapshot was signed with (see ExecRequest), or the snapshot
	// is refused. Outcome.Step gives the step of a new snapshot.
	RunID   string
	Session string
	Step    int
}

// Outcome is the result of Exec or Resume. Snapshot is set when the run is
// waiting: store it and pass it to Resume with the settlements.
type Outcome struct {
	Result   Result
	Snapshot []byte
	// Step is the step Snapshot is bound to (with the run id and session).
	Step int
}

// hostState is the host's bookkeeping of a run, saved inside its snapshot so
// that a snapshot is self-contained.
type hostState struct {
	RunID       string        `json:"runId"`
	Session     string        `json:"session,omitempty"`
	Step        int           `json:"step"`
	Tools       []Tool        `json:"tools"`
	Limits      Limits        `json:"limits"`
	Pending     []pendingCall `json:"pending,omitempty"`
	Output      []Output      `json:"output,omitempty"`
	OutputBytes int           `json:"outputBytes"`
	Telemetry   Telemetry     `json:"telemetry"`
	NextCall    int           `json:"nextCall"`
	// Pos maps the script's positions back to the guest's code.
	Pos *positions `json:"pos,omitempty"`
}

type pendingCall struct {
	CallID  string          `json:"callId"`
	ToolID  string          `json:"toolId,omitempty"`
	Source  string          `json:"source,omitempty"`
	Input   json.RawMessage `json:"input,omitempty"`
	Yield   bool            `json:"yield,omitempty"`
	Reason  string          `json:"reason,omitempty"`
	Resolve engine.Value    `json:"resolve"`
	Reject  engine.Value    `json:"reject"`
}

type guestError struct{ Name, Message, Stack string }

// run serves one exec or resume slice of a run on one VM.
type run struct {
	e        *Engine
	vm       *engine.VM
	st       hostState
	cat      *Catalog
	bridge   Bridge
	deadline time.Time
	fatal    *contracts.Error
	done     bool
	value    json.RawMessage
	failed   *guestError
	began    time.Time
	// byBudget: the deadline is the end of the run's total CPU budget
	// (maxTotalCpuMs), not of this slice's timeoutMs.
	byBudget bool
}

type nullBridge struct{ CatalogBridge }

func (nullBridge) Call(context.Context, ToolCall) (CallOutcome, error) {
	return CallOutcome{}, errors.New("no tool bridge is configured for this run")
}

// Exec runs a code-mode program until it completes, fails or waits. It
// returns an error only when ctx is cancelled or req is nil; every other
// failure is a failed Result.
func (e *Engine) Exec(ctx context.Context, req *ExecRequest) (*Outcome, error) {
	if req == nil {
		return nil, errors.New("sandbox: nil ExecRequest")
	}
	began := time.Now()
	limits := withDefaults(req.Limits, e.limits)
	runID := req.RunID
	if runID == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		runID = "run_" + hex.EncodeToString(b[:])
	}
	st := hostState{RunID: runID, Session: req.Session, Step: max(req.Step, 1), Tools: req.Catalog, Limits: limits}
	fail := func(err error) (*Outcome, error) {
		ce := contracts.AsError(err)
		return &Outcome{Result: Result{
			Status: StatusFailed, Error: ce.Message, Code: ce.Code,
			Telemetry: Telemetry{DurationMs: ms(time.Since(began))},
		}}, nil
	}
	if limits.MemoryLimitBytes > e.maxMem {
		return fail(contracts.Errorf(contracts.CodeInvalidInput, "memoryLimitBytes %d exceeds the engine's maximum %d", limits.MemoryLimitBytes, e.maxMem))
	}
	script, pos, err := prepare(req.Input, req.Scope)
	if err != nil {
		return fail(err)
	}
	st.Pos = pos
	cat, err := NewCatalog(req.Catalog)
	if err != nil {
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return nil, cancelled(err)
	}
	vm, err := e.pool.Get(ctx)
	if err != nil {
		return fail(contracts.Errorf(contracts.CodeRuntimeUnavailable, "start a quickjs vm: %v", err))
	}
	r := e.newRun(ctx, vm, st, cat, req.Bridge, began)
	defer r.release(ctx)
	ctx = vm.Context(ctx)
	if err := r.applyLimits(ctx); err != nil {
		return r.finish(ctx, err)
	}
	if err := r.installRuntime(ctx); err != nil {
		return r.finish(ctx, err)
	}
	fn, err := vm.Eval(ctx, script, scriptName, 0)
	if err != nil {
		var je *engine.JSError
		if errors.As(err, &je) && !je.Uncatchable && je.Name == "SyntaxError" {
			err = contracts.Errorf(contracts.CodeInvalidInput, "%s%s", je.Error(), pos.guestStack(je.Stack))
		}
		return r.finish(ctx, err)
	}
	undef, err := vm.Undefined(ctx)
	if err != nil {
		vm.Free(ctx, fn)
		return r.finish(ctx, err)
	}
	res, err := vm.Call(ctx, e.start, undef, fn)
	vm.Free(ctx, fn)
	vm.Free(ctx, undef)
	vm.Free(ctx, res)
	if err == nil {
		err = vm.ExecutePendingJobs(ctx)
	}
	return r.finish(ctx, err)
}

// Resume restores a waiting run into a VM (a warm pooled one holding the
// image, over which the snapshot's changed chunks are written), settles
// its pending calls and continues it until it completes, fails or waits
// again. A refused snapshot (bad signature, other wasm build, truncated)
// fails with internal_error, an oversized one with snapshot_limit_exceeded.
func (e *Engine) Resume(ctx context.Context, req *ResumeRequest) (*Outcome, error) {
	if req == nil {
		return nil, errors.New("sandbox: nil ResumeRequest")
	}
	began := time.Now()
	fail := func(code contracts.ErrorCode, format string, args ...any) (*Outcome, error) {
		return &Outcome{Result: Result{
			Status: StatusFailed, Error: fmt.Sprintf(format, args...), Code: code,
			Telemetry: Telemetry{DurationMs: ms(time.Since(began))},
		}}, nil
	}
	maxBytes := withDefaults(req.Limits, e.limits).MaxSnapshotBytes
	// Verified and decompressed here; its memory is written straight into
	// the VM below, over the image the pooled VM holds.
	snap, err := e.codec.Open(req.Snapshot, maxBytes)
	if err != nil {
		if errors.Is(err, snapshot.ErrTooLarge) {
			return fail(contracts.CodeSnapshotLimitExceeded, "code mode snapshot refused: %v", err)
		}
		return fail(contracts.CodeInternalError, "code mode snapshot refused: %v", err)
	}
	defer snap.Release()
	want := snapshot.Binding{RunID: req.RunID, Session: req.Session, Step: uint32(max(req.Step, 0))} //nolint:gosec // G115: a step is a count of suspensions
	if snap.Binding != want {
		return fail(contracts.CodeInternalError, "code mode snapshot refused: it belongs to %s, not to %s", snap.Binding, want)
	}
	var st hostState
	if err := json.Unmarshal(snap.Host, &st); err != nil {
		return fail(contracts.CodeInternalError, "code mode snapshot refused: host state: %v", err)
	}
	st.Step++
	st.Limits = withDefaults(req.Limits, withDefaults(st.Limits, e.limits))
	if st.Limits.MemoryLimitBytes > e.maxMem {
		st.Limits.MemoryLimitBytes = e.maxMem
	}
	cat, err := NewCatalog(st.Tools)
	if err != nil {
		return fail(contracts.CodeInternalError, "code mode snapshot refused: %v", err)
	}
	byID := map[string]bool{}
	for _, p := range st.Pending {
		if !p.Yield {
			byID[p.CallID] = true
		}
	}
	seen := map[string]bool{}
	for _, s := range req.Settlements {
		if !byID[s.CallID] || seen[s.CallID] {
			return fail(contracts.CodeInvalidInput, "settlement for unknown or already settled call %q", s.CallID)
		}
		seen[s.CallID] = true
		if s.Error == "" && len(s.Value) > 0 && !json.Valid(s.Value) {
			return fail(contracts.CodeInvalidInput, "settlement for call %q carries invalid JSON", s.CallID)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, cancelled(err)
	}
	vm, err := e.pool.Get(ctx)
	if err != nil {
		return fail(contracts.CodeRuntimeUnavailable, "start a quickjs vm: %v", err)
	}
	if err := e.rt.LoadOverImage(ctx, vm, snap.MemorySize, engine.Registers{
		StackPointer: snap.StackPointer, RuntimePtr: snap.RuntimePtr, ContextPtr: snap.ContextPtr,
	}, snap.Apply); err != nil {
		e.pool.Discard(ctx, vm)
		return fail(contracts.CodeInternalError, "restore code mode snapshot: %v", err)
	}
	if e.obs != nil {
		e.obs.Restored(time.Since(began))
	}
	st.Telemetry.Resumes++
	r := e.newRun(ctx, vm, st, cat, req.Bridge, began)
	defer r.release(ctx)
	ctx = vm.Context(ctx)
	if err := r.applyLimits(ctx); err != nil {
		return r.finish(ctx, err)
	}
	// Yields first, then the settlements in arrival order; the job queue is
	// drained after each, as it would be had the results come in live.
	for _, p := range append([]pendingCall(nil), r.st.Pending...) {
		if p.Yield {
			if err := r.settle(ctx, p.CallID, `{"value":null}`); err != nil {
				return r.finish(ctx, err)
			}
		}
	}
	for _, s := range req.Settlements {
		if r.done || r.failed != nil || r.fatal != nil {
			break
		}
		if err := r.settle(ctx, s.CallID, envelope(s.Value, s.Error)); err != nil {
			return r.finish(ctx, err)
		}
	}
	return r.finish(ctx, nil)
}

func (e *Engine) newRun(ctx context.Context, vm *engine.VM, st hostState, cat *Catalog, b Bridge, began time.Time) *run {
	if b == nil {
		b = nullBridge{}
	}
	r := &run{e: e, vm: vm, st: st, cat: cat, bridge: b, began: began}
	r.deadline = began.Add(time.Duration(st.Limits.TimeoutMs) * time.Millisecond)
	// The total budget is what is left of maxTotalCpuMs after the slices
	// before this one.
	left := time.Duration(float64(st.Limits.MaxTotalCPUMs)*float64(time.Millisecond)) -
		time.Duration(st.Telemetry.DurationMs*float64(time.Millisecond))
	if budget := began.Add(left); budget.Before(r.deadline) {
		r.deadline, r.byBudget = budget, true
	}
	if d, ok := ctx.Deadline(); ok && d.Before(r.deadline) {
		r.byBudget = false
		r.deadline = d
	}
	vm.SetHandler(r)
	return r
}

func (r *run) release(ctx context.Context) {
	r.vm.SetHandler(nil)
	r.e.pool.Put(ctx, r.vm)
}

func (r *run) applyLimits(ctx context.Context) error {
	//nolint:gosec // G115: Exec refuses and Resume clamps a limit above the engine's maximum, which NewEngine caps at 1 GiB
	if err := r.vm.SetMemoryLimit(ctx, uint32(r.st.Limits.MemoryLimitBytes)); err != nil {
		return err
	}
	return r.vm.SetMaxStackSize(ctx, r.e.stack)
}

// installRuntime defines the run's globals (ALL_TOOLS, tools, MCP, API …).
func (r *run) installRuntime(ctx context.Context) error {
	cfg, err := r.guestConfig()
	if err != nil {
		return err
	}
	catalog, err := json.Marshal(r.cat.Entries())
	if err != nil {
		return err
	}
	cs, err := r.vm.NewString(ctx, string(cfg))
	if err != nil {
		return err
	}
	defer r.vm.Free(ctx, cs)
	ca, err := r.vm.NewString(ctx, string(catalog))
	if err != nil {
		return err
	}
	defer r.vm.Free(ctx, ca)
	undef, err := r.vm.Undefined(ctx)
	if err != nil {
		return err
	}
	defer r.vm.Free(ctx, undef)
	res, err := r.vm.Call(ctx, r.e.install, undef, cs, ca)
	if err != nil {
		return err
	}
	r.vm.Free(ctx, res)
	return nil
}

// guestConfig is the JSON the guest runtime's install function takes.
func (r *run) guestConfig() ([]byte, error) {
	var seed [16]byte
	_, _ = rand.Read(seed[:])
	return json.Marshal(map[string]any{
		"safeNames": r.cat.SafeNames(),
		"mcp":       r.cat.mcpNamespaces(),
		"seed": []uint32{
			binary.LittleEndian.Uint32(seed[0:]), binary.LittleEndian.Uint32(seed[4:]),
			binary.LittleEndian.Uint32(seed[8:]), binary.LittleEndian.Uint32(seed[12:]),
		},
	})
}

// settle resolves a pending call's promise with an envelope and drains the
// job queue.
func (r *run) settle(ctx context.Context, callID, env string) error {
	idx := -1
	for i, p := range r.st.Pending {
		if p.CallID == callID {
			idx = i
			break
		}
	}
	if idx < 0 {
		return nil
	}
	p := r.st.Pending[idx]
	r.st.Pending = append(r.st.Pending[:idx:idx], r.st.Pending[idx+1:]...)
	s, err := r.vm.NewString(ctx, env)
	if err != nil {
		return err
	}
	undef, err := r.vm.Undefined(ctx)
	if err != nil {
		return err
	}
	res, err := r.vm.Call(ctx, p.Resolve, undef, s)
	r.vm.Free(ctx, s)
	r.vm.Free(ctx, undef)
	r.vm.Free(ctx, res)
	r.vm.Free(ctx, p.Resolve)
	r.vm.Free(ctx, p.Reject)
	if err != nil {
		return err
	}
	return r.vm.ExecutePendingJobs(ctx)
}

// Interrupt stops the guest at the deadline, on cancellation, or once the
// host has decided to fail the run.
func (r *run) Interrupt(ctx context.Context) bool {
	return r.fatal != nil || ctx.Err() != nil || time.Now().After(r.deadline)
}

// HostCall serves the guest runtime's single host function:
// toolq(op, payloadJSON).
func (r *run) HostCall(ctx context.Context, vm *engine.VM, name string, _ engine.Value, args []engine.Value) (engine.Value, error) {
	if name != hostFunctionName || len(args) != 2 {
		return 0, fmt.Errorf("unknown host function %q", name)
	}
	op, err := vm.String(ctx, args[0])
	if err != nil {
		return 0, err
	}
	payload, err := vm.String(ctx, args[1])
	if err != nil {
		return 0, err
	}
	switch op {
	case "output":
		return r.output(ctx, payload)
	case "done":
		return r.doneOp(ctx, payload)
	case "fail":
		var g guestError
		if err := json.Unmarshal([]byte(payload), &g); err != nil {
			g = guestError{Message: "the code failed with an unreadable error"}
		}
		if !r.done && r.failed == nil {
			r.failed = &g
		}
		return vm.Undefined(ctx)
	case "search":
		return r.search(ctx, payload)
	case "describe":
		return r.describe(ctx, payload)
	case "call":
		return r.call(ctx, payload)
	case "yield":
		return r.yield(ctx, payload)
	case "api":
		return r.api(ctx, payload)
	}
	return 0, fmt.Errorf("unknown host operation %q", op)
}

func (r *run) addOutputBytes(n int) error {
	r.st.OutputBytes += n
	if r.st.OutputBytes > r.st.Limits.MaxOutputBytes || r.st.OutputBytes < 0 {
		r.fatal = contracts.Errorf(contracts.CodeOutputLimitExceeded,
			"code mode output exceeded maxOutputBytes (%d)", r.st.Limits.MaxOutputBytes)
		return r.fatal
	}
	return nil
}

func (r *run) output(ctx context.Context, payload string) (engine.Value, error) {
	var item struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal([]byte(toUTF8(payload)), &item); err != nil {
		return 0, fmt.Errorf("output: %w", err)
	}
	if len(r.st.Output) >= r.st.Limits.MaxOutputItems {
		r.fatal = contracts.Errorf(contracts.CodeOutputLimitExceeded,
			"code mode output exceeded maxOutputItems (%d items)", r.st.Limits.MaxOutputItems)
		return 0, r.fatal
	}
	var o Output
	switch item.Type {
	case OutputText:
		o = Output{Type: OutputText, Text: item.Text}
		if err := r.addOutputBytes(len(o.Text) + contracts.CodeModeOutputItemBytes); err != nil {
			return 0, err
		}
	case OutputJSON:
		v := compact(item.Value)
		o = Output{Type: OutputJSON, Value: v}
		if err := r.addOutputBytes(len(v) + contracts.CodeModeOutputItemBytes); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("output: unknown type %q", item.Type)
	}
	r.st.Output = append(r.st.Output, o)
	return r.vm.Undefined(ctx)
}

func (r *run) doneOp(ctx context.Context, payload string) (engine.Value, error) {
	if r.done || r.failed != nil {
		return r.vm.Undefined(ctx)
	}
	v := json.RawMessage("null")
	if payload != "" {
		p := []byte(toUTF8(payload))
		if !json.Valid(p) {
			return 0, errors.New("the returned value is not valid JSON")
		}
		v = compact(p)
	}
	if err := r.addOutputBytes(len(v)); err != nil {
		return 0, err
	}
	r.done, r.value = true, v
	return r.vm.Undefined(ctx)
}

func (r *run) search(ctx context.Context, payload string) (engine.Value, error) {
	var q struct {
		Query string  `json:"query"`
		Limit float64 `json:"limit"`
	}
	if err := json.Unmarshal([]byte(toUTF8(payload)), &q); err != nil {
		return 0, fmt.Errorf("tools.search: %w", err)
	}
	limit := int(q.Limit)
	if limit <= 0 {
		limit = r.st.Limits.SearchDefaultLimit
	}
	if limit > r.st.Limits.MaxSearchLimit {
		limit = r.st.Limits.MaxSearchLimit
	}
	r.st.Telemetry.BridgeCalls.Search++
	ctx, cancel := context.WithDeadline(ctx, r.deadline)
	defer cancel()
	hits, err := r.bridge.Search(ctx, r.cat, q.Query, limit)
	if err != nil {
		return 0, fmt.Errorf("tools.search: %w", err)
	}
	if len(hits) > limit {
		hits = hits[:limit]
	}
	out := hits[:0:0]
	for _, h := range hits {
		if t, ok := r.cat.Lookup(h.ID); ok && t.Source != SourceMCP {
			out = append(out, h)
		}
	}
	if out == nil {
		out = []CatalogEntry{}
	}
	return r.returnJSON(ctx, map[string]any{"value": out})
}

func (r *run) describe(ctx context.Context, payload string) (engine.Value, error) {
	var q struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(toUTF8(payload)), &q); err != nil {
		return 0, fmt.Errorf("tools.describe: %w", err)
	}
	t, ok := r.cat.Lookup(q.ID)
	if !ok || t.Source == SourceMCP {
		return 0, fmt.Errorf("tools.describe: unknown tool %q", q.ID)
	}
	r.st.Telemetry.BridgeCalls.Describe++
	ctx, cancel := context.WithDeadline(ctx, r.deadline)
	defer cancel()
	d, err := r.bridge.Describe(ctx, t)
	if err != nil {
		return 0, fmt.Errorf("tools.describe: %w", err)
	}
	if len(d.Parameters) == 0 {
		d.Parameters = json.RawMessage("{}")
	}
	return r.returnJSON(ctx, map[string]any{"value": d})
}

// api serves $api(toolName, {schema}) of an MCP namespace: no bridge
// call, the declarations come from the run's catalog.
func (r *run) api(ctx context.Context, payload string) (engine.Value, error) {
	var q struct {
		Namespace string `json:"namespace"`
		Tool      string `json:"tool"`
		Schema    bool   `json:"schema"`
	}
	if err := json.Unmarshal([]byte(toUTF8(payload)), &q); err != nil {
		return 0, fmt.Errorf("$api: %w", err)
	}
	decl, err := r.cat.mcpAPI(q.Namespace, q.Tool, q.Schema)
	if err != nil {
		return r.vm.NewString(ctx, envelope(nil, "$api: "+err.Error()))
	}
	return r.returnJSON(ctx, map[string]any{"value": decl})
}

func (r *run) returnJSON(ctx context.Context, v any) (engine.Value, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	return r.vm.NewString(ctx, string(b))
}

func (r *run) pendingTools() int {
	n := 0
	for _, p := range r.st.Pending {
		if !p.Yield {
			n++
		}
	}
	return n
}

func (r *run) call(ctx context.Context, payload string) (engine.Value, error) {
	var q struct {
		ID    string          `json:"id"`
		Input json.RawMessage `json:"input"`
		MCP   bool            `json:"mcp"`
	}
	if err := json.Unmarshal([]byte(toUTF8(payload)), &q); err != nil {
		return 0, fmt.Errorf("tool call: %w", err)
	}
	t, ok := r.cat.Lookup(q.ID)
	if !ok {
		return 0, fmt.Errorf("unknown tool %q: it is not in this run's catalog", q.ID)
	}
	if t.Source == SourceMCP && !q.MCP {
		return 0, fmt.Errorf("tool %q is an MCP tool: call it as MCP.%s.%s(input)", q.ID, camelName(mcpServerName(t)), mcpFnName(t))
	}
	input := compact(q.Input)
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	r.st.NextCall++
	callID := fmt.Sprintf("call_%d", r.st.NextCall)
	r.st.Telemetry.BridgeCalls.Call++
	r.st.Telemetry.NestedCalls++
	bctx, cancel := context.WithDeadline(ctx, r.deadline)
	out, err := r.bridge.Call(bctx, ToolCall{RunID: r.st.RunID, CallID: callID, Tool: t, Input: input})
	cancel()
	if err != nil {
		return r.vm.NewString(ctx, envelope(nil, err.Error()))
	}
	if !out.Pending {
		if out.Error == "" && len(out.Value) > 0 && !json.Valid(out.Value) {
			return r.vm.NewString(ctx, envelope(nil, "the tool returned invalid JSON"))
		}
		return r.vm.NewString(ctx, envelope(out.Value, out.Error))
	}
	if r.pendingTools() >= r.st.Limits.MaxPendingToolCalls {
		return 0, fmt.Errorf("too many pending tool calls (maxPendingToolCalls %d)", r.st.Limits.MaxPendingToolCalls)
	}
	return r.pend(ctx, pendingCall{CallID: callID, ToolID: t.ID, Source: t.Source, Input: input})
}

func (r *run) yield(ctx context.Context, payload string) (engine.Value, error) {
	var q struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal([]byte(toUTF8(payload)), &q)
	r.st.NextCall++
	return r.pend(ctx, pendingCall{CallID: fmt.Sprintf("yield_%d", r.st.NextCall), Yield: true, Reason: q.Reason})
}

func (r *run) pend(ctx context.Context, p pendingCall) (engine.Value, error) {
	promise, resolve, reject, err := r.vm.NewPromise(ctx)
	if err != nil {
		return 0, err
	}
	p.Resolve, p.Reject = resolve, reject
	r.st.Pending = append(r.st.Pending, p)
	return promise, nil
}

// finish classifies the VM's state after a slice and builds the outcome.
func (r *run) finish(ctx context.Context, err error) (*Outcome, error) {
	res := Result{Output: r.st.Output}
	fail := func(code contracts.ErrorCode, msg string) {
		res.Status, res.Code, res.Error = StatusFailed, code, msg
	}
	var (
		je   *engine.JSError
		trap *engine.TrapError
		ce   *contracts.Error
	)
	switch {
	case r.fatal != nil:
		fail(r.fatal.Code, r.fatal.Message)
		if err != nil && errors.As(err, &trap) {
			r.vm.Kill()
		}
	case err != nil && errors.As(err, &trap):
		r.vm.Kill()
		msg := "the code mode vm crashed: " + trap.Err.Error()
		if strings.Contains(trap.Err.Error(), "unreachable") {
			msg = fmt.Sprintf("the code exceeded the memory limit of %d bytes (the vm aborted)", r.st.Limits.MemoryLimitBytes)
		}
		fail(contracts.CodeInternalError, msg)
	case err != nil && errors.As(err, &je) && je.Uncatchable || err != nil && ctx.Err() != nil:
		switch {
		case errors.Is(ctx.Err(), context.Canceled):
			return nil, cancelled(ctx.Err())
		case !time.Now().Before(r.deadline) && r.byBudget:
			fail(contracts.CodeTimeout, fmt.Sprintf("code mode run exceeded its total CPU budget of %d ms (maxTotalCpuMs) over exec and %d resumes",
				r.st.Limits.MaxTotalCPUMs, r.st.Telemetry.Resumes))
		case !time.Now().Before(r.deadline):
			fail(contracts.CodeTimeout, fmt.Sprintf("code mode run timed out after %d ms", r.timeoutMs()))
		case je != nil && strings.Contains(je.Message, "out of memory"):
			fail(contracts.CodeInternalError, fmt.Sprintf("the code exceeded the memory limit of %d bytes", r.st.Limits.MemoryLimitBytes))
		default:
			fail(contracts.CodeInternalError, err.Error())
		}
	case err != nil && errors.As(err, &ce):
		fail(ce.Code, ce.Message)
	case err != nil && errors.As(err, &je):
		if strings.Contains(je.Message, "out of memory") {
			fail(contracts.CodeInternalError, fmt.Sprintf("the code exceeded the memory limit of %d bytes", r.st.Limits.MemoryLimitBytes))
		} else {
			fail("", toUTF8(je.Error()+r.st.Pos.guestStack(je.Stack)))
		}
	case err != nil:
		fail(contracts.CodeInternalError, err.Error())
	case r.failed != nil:
		msg := r.failed.Message
		if r.failed.Name != "" {
			msg = r.failed.Name + ": " + msg
		}
		if strings.Contains(msg, "out of memory") {
			fail(contracts.CodeInternalError, fmt.Sprintf("the code exceeded the memory limit of %d bytes", r.st.Limits.MemoryLimitBytes))
		} else {
			fail("", msg+r.st.Pos.guestStack(r.failed.Stack))
		}
	case r.done:
		res.Status, res.Value = StatusCompleted, r.value
	case len(r.st.Pending) > 0:
		res.Status, res.RunID = StatusWaiting, r.st.RunID
		res.Reason = ReasonYield
		for _, p := range r.st.Pending {
			if !p.Yield {
				res.Reason = ReasonPendingTools
				res.PendingToolCalls = append(res.PendingToolCalls, PendingToolCall{
					CallID: p.CallID, ToolID: p.ToolID, Source: p.Source, Input: p.Input,
				})
			}
		}
	default:
		fail("", "the code awaits a promise that nothing will settle")
	}
	res.Error = clipText(res.Error, contracts.CodeModeMaxErrorBytes)
	r.st.Telemetry.DurationMs += ms(time.Since(r.began))
	res.Telemetry = r.st.Telemetry
	if res.Status != StatusWaiting {
		return &Outcome{Result: res}, nil
	}
	blob, serr := r.snapshot(ctx)
	if serr != nil {
		code := contracts.CodeInternalError
		if errors.Is(serr, snapshot.ErrTooLarge) {
			code = contracts.CodeSnapshotLimitExceeded
		}
		res = Result{
			Status: StatusFailed, Code: code, Error: "code mode snapshot: " + serr.Error(),
			Output: r.st.Output, Telemetry: r.st.Telemetry,
		}
		return &Outcome{Result: res}, nil
	}
	res.Telemetry.SnapshotBytes = len(blob)
	return &Outcome{Result: res, Snapshot: blob, Step: r.st.Step}, nil
}

func (r *run) timeoutMs() int64 {
	return r.deadline.Sub(r.began).Milliseconds()
}

func (r *run) snapshot(ctx context.Context) ([]byte, error) {
	regs, err := r.vm.Registers(ctx)
	if err != nil {
		return nil, err
	}
	host, err := json.Marshal(r.st)
	if err != nil {
		return nil, err
	}
	return r.e.codec.Encode(&snapshot.Snapshot{
		Memory:       r.vm.Memory(),
		StackPointer: regs.StackPointer,
		RuntimePtr:   regs.RuntimePtr,
		ContextPtr:   regs.ContextPtr,
		Host:         host,
		Binding:      snapshot.Binding{RunID: r.st.RunID, Session: r.st.Session, Step: uint32(r.st.Step)}, //nolint:gosec // G115: a step is a count of suspensions
	}, r.st.Limits.MaxSnapshotBytes)
}

// envelope is what a pending call's promise resolves with.
func envelope(value json.RawMessage, errMsg string) string {
	if errMsg != "" {
		e := map[string]string{"error": errMsg}
		// A nested job's failure reads "<code>: <message>": the guest's
		// Error gets the code as its code property.
		if code, _, ok := strings.Cut(errMsg, ": "); ok && contracts.ErrorCode(code).Valid() {
			e["code"] = code
		}
		b, _ := json.Marshal(e)
		return string(b)
	}
	if len(value) == 0 {
		value = json.RawMessage("null")
	}
	return `{"value":` + string(value) + `}`
}

func compact(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return v
	}
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return v
	}
	return b.Bytes()
}

// toUTF8 turns the WTF-8 that QuickJS produces into UTF-8: a lone surrogate
// becomes U+FFFD.
func toUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func cancelled(err error) error {
	return &contracts.Error{Code: contracts.CodeCancelled, Message: "code mode run cancelled: " + err.Error()}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
