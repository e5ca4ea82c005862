package codeexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/worker"
)

// Register builds the tool from cfg and adds it to w as code_execution:
// jobs are pulled only while some provider accepts them (Accepting), and
// the tool is listed in the catalog for code-mode runs. A failure that is
// not retryable fails the job at once; a provider's Retry-After becomes the
// job's retry delay.
func Register(w *worker.Worker, cfg *Config) (*CodeExecution, error) {
	if w == nil {
		return nil, errors.New("codeexec: nil worker")
	}
	t, err := NewCodeExecution(cfg)
	if err != nil {
		return nil, fmt.Errorf("code_execution: %w", err)
	}
	t.rates = w.Rates()
	for _, name := range t.order {
		if lim := t.backends[name].rate; lim != nil && lim.Rate > 0 {
			t.log.Info("code_execution: provider key rate limit", "provider", name, "key_id", lim.KeyID, "rate", lim.String())
		}
	}
	if err := w.Register(ToolName, worker.HandlerFunc(t.handleJob), &worker.ToolConfig{
		Ready:      t.Accepting,
		RateLimits: t.firstRate,
		Timeout:    5 * time.Minute,
		Tenants:    slices.Clone(cfg.Tenants),
		Catalog: &contracts.CatalogTool{
			Label:       "Remote code execution",
			Description: "Run an analysis task in a model provider's server-side Python sandbox (xAI, OpenAI, Gemini, Anthropic) and return its answer, the executed code and its output.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"task":{"type":"string"},"provider":{"type":"string","enum":["xai","openai","gemini","anthropic"]},"model":{"type":"string"},"maxTurns":{"type":"integer","minimum":1},"timeoutSeconds":{"type":"number","exclusiveMinimum":0},"failover":{"type":"array","items":{"type":"string"}}},"required":["task"]}`),
		},
	}); err != nil {
		return nil, err
	}
	return t, nil
}

// handleJob is Handle with its errors turned into the worker's retry
// decisions.
func (t *CodeExecution) handleJob(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
	// The worker took the first request's start before the job ran.
	res, err := t.Handle(context.WithValue(ctx, firstTakenKey{}, true), job)
	if err == nil {
		return res, nil
	}
	var cerr *contracts.Error
	if errors.As(err, &cerr) && !cerr.Retryable {
		return nil, worker.Permanent(err)
	}
	if d := RetryAfter(err); d > 0 {
		return nil, worker.RetryAfter(d, err)
	}
	return nil, err
}

// firstTakenKey marks a job whose worker took one start of its first
// provider's key (firstRate) before it ran.
type firstTakenKey struct{}

// firstRate is the rate limit of the key a job's first request goes out
// with, which the worker counts before the job runs, waiting without a
// slot and without spending an attempt while it is spent. Only a Rate 0
// default when the configuration sets none, so that an operator's limit
// still applies.
func (t *CodeExecution) firstRate(job *contracts.Job) []*contracts.RateLimit {
	in, err := DecodeInput(job.Input)
	if err != nil || in.Validate() != nil {
		return nil // the job fails at once, making no request
	}
	b := t.backends[t.chain(in)[0]]
	if b == nil || !b.enabled || b.rate == nil {
		return nil
	}
	return []*contracts.RateLimit{b.rate}
}
