package producer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolq/toolq/contracts"
)

// SubmitCode enqueues a code_mode.exec job: in's code runs in a worker's
// sandbox, calling the catalog's tools through nested jobs. The input is
// checked first (invalid_input); the worker also caps its limits. Await the
// job with AwaitCodeMode. Without in.AutoResume a run that suspends on
// nested calls parks as waiting until a Wait job resumes it; with it, the
// job's terminal event follows once the calls are back.
func (p *Producer) SubmitCode(ctx context.Context, in *contracts.CodeModeExecInput, opts *SubmitOpts) (*contracts.Job, error) {
	if in == nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "code_mode.exec needs an input {code, language}")
	}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	data, err := json.Marshal(in)
	if err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "code_mode.exec input cannot be encoded: %v", err)
	}
	return p.Submit(ctx, contracts.ToolCodeModeExec, data, opts)
}

// Wait enqueues a code_mode.wait job for run runID (the id of its exec
// job): once the run's pending calls are back it resumes the run and
// completes with the run's next CodeModeResult, which may be waiting again.
// The job must be in the run's session (opts.Session, or the producer's).
func (p *Producer) Wait(ctx context.Context, runID string, opts *SubmitOpts) (*contracts.Job, error) {
	if err := contracts.ValidateID("run id", runID); err != nil {
		return nil, err
	}
	data, err := json.Marshal(contracts.CodeModeWaitInput{RunID: runID})
	if err != nil {
		return nil, err
	}
	return p.Submit(ctx, contracts.ToolCodeModeWait, data, opts)
}

// AwaitCodeMode awaits a code_mode.exec or code_mode.wait job and reads its
// CodeModeResult (see CodeModeResult). With opts.Parked it also returns a
// waiting result; without, it waits for the run to end (which needs
// AutoResume or a Wait). A failed run is a result with Status failed, not
// an error; result.Err() turns it into one.
func (p *Producer) AwaitCodeMode(ctx context.Context, session, jobID string, opts *AwaitOpts) (*contracts.CodeModeResult, error) {
	ev, err := p.Await(ctx, session, jobID, opts)
	if err != nil {
		return nil, err
	}
	return CodeModeResult(ev)
}

// SubmitToolResult answers a pending call of a code-mode run to a client
// tool (a tool the requester runs itself: it is listed in the run's waiting
// result with source "client"). call is the call as the waiting result
// lists it: its CallID and the Token the run takes the answer with.
// Exactly one of result and toolErr is used: toolErr, when not nil,
// rejects the call in the guest with its message.
func (p *Producer) SubmitToolResult(ctx context.Context, session, runID string, call contracts.CodeModePendingToolCall, result json.RawMessage, toolErr *contracts.Error) error {
	callID := call.CallID
	tr := contracts.ToolResult{RunID: runID, CallID: callID, Status: contracts.StatusCompleted, Result: result, Token: call.Token}
	if toolErr != nil {
		tr.Status, tr.Result, tr.Error = contracts.StatusFailed, nil, toolErr
	}
	if err := tr.Validate(); err != nil {
		return err
	}
	input, err := json.Marshal(tr)
	if err != nil {
		return contracts.Errorf(contracts.CodeInvalidInput, "tool result cannot be encoded: %v", err)
	}
	// Deterministic per session, run, call and token: a retried answer
	// enqueues once, and an answer sent under another session or without
	// the token (refused by the run) cannot take its id first.
	sum := sha256.Sum256([]byte(session + "\x00" + runID + "\x00" + callID + "\x00" + call.Token))
	_, err = p.Submit(ctx, contracts.ToolCodeModeResult, input, &SubmitOpts{
		ID:      "client-" + hex.EncodeToString(sum[:16]),
		Session: session,
	})
	if errors.Is(err, ErrDuplicate) {
		return nil // this answer, sent before: it counts once
	}
	return err
}

// RegisterClientTool puts a client tool in the catalog: code-mode runs of
// the producer's tenant can call it, and its calls come back to the
// requester in the waiting result instead of running on a worker. Runs of
// other tenants never see it; a tenant holds at most 64 client tools.
func (p *Producer) RegisterClientTool(ctx context.Context, t contracts.CatalogTool) error {
	t.Source, t.Tool = contracts.SourceClient, ""
	t.UpdatedAt = time.Now().UTC()
	if err := t.Validate(); err != nil {
		return err
	}
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	data, err := json.Marshal(t)
	if err != nil {
		return err
	}
	if p.cfg.TenantAccount {
		// Through the tenant's import: the server files the entry under
		// t.<tenant>., where only the tenant's own runs see it.
		ack, err := p.js.Publish(ctx, contracts.KVSubject(p.cfg.Subjects.CatalogBucket(), contracts.CatalogKey(t.ID)), data)
		if err != nil {
			return fmt.Errorf("producer: register %s: %w", t.ID, err)
		}
		p.noteCatalogSeq(ack.Sequence)
		return nil
	}
	kv, err := p.js.KeyValue(ctx, p.cfg.Subjects.CatalogBucket())
	if err != nil {
		return fmt.Errorf("producer: catalog: %w", err)
	}
	rev, err := kv.Put(ctx, contracts.CatalogKey(t.ID), data)
	if err != nil {
		return fmt.Errorf("producer: register %s: %w", t.ID, err)
	}
	p.noteCatalogSeq(rev)
	return nil
}

// noteCatalogSeq keeps the highest catalog sequence this producer wrote.
func (p *Producer) noteCatalogSeq(seq uint64) {
	for {
		cur := p.catalogSeq.Load()
		if seq <= cur || p.catalogSeq.CompareAndSwap(cur, seq) {
			return
		}
	}
}
