package producer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolq/toolq/contracts"
)

// SubmitToolResult answers a pending call of a code-mode run to a client
// tool (a tool the requester runs itself: it is listed in the run's waiting
// result with source "client"). Exactly one of result and toolErr is used:
// toolErr, when not nil, rejects the call in the guest with its message.
func (p *Producer) SubmitToolResult(ctx context.Context, session, runID, callID string, result json.RawMessage, toolErr *contracts.Error) error {
	tr := contracts.ToolResult{RunID: runID, CallID: callID, Status: contracts.StatusCompleted, Result: result}
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
	// Deterministic per session, run and call: a retried answer enqueues
	// once, and an answer sent under another session cannot shadow it.
	sum := sha256.Sum256([]byte(session + "\x00" + runID + "\x00" + callID))
	_, err = p.Submit(ctx, contracts.ToolCodeModeResult, input, &SubmitOpts{
		ID:      "client-" + hex.EncodeToString(sum[:16]),
		Session: session,
	})
	return err
}

// RegisterClientTool puts a client tool in the catalog: code-mode runs can
// call it, and its calls come back to the requester in the waiting result
// instead of running on a worker.
func (p *Producer) RegisterClientTool(ctx context.Context, t contracts.CatalogTool) error {
	t.Source, t.Tool = contracts.SourceClient, ""
	t.UpdatedAt = time.Now().UTC()
	if err := t.Validate(); err != nil {
		return err
	}
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	kv, err := p.js.KeyValue(ctx, p.cfg.Subjects.CatalogBucket())
	if err != nil {
		return fmt.Errorf("producer: catalog: %w", err)
	}
	data, err := json.Marshal(t)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, contracts.CatalogKey(t.ID), data); err != nil {
		return fmt.Errorf("producer: register %s: %w", t.ID, err)
	}
	return nil
}
