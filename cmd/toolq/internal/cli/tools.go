package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/codeexec"
	"github.com/toolq/toolq/worker"
)

// registerTools adds the tools of this binary beyond the worker's built-ins.
func registerTools(g *globals, w *worker.Worker, publish func(subject string, data []byte) error, providersFile string) error {
	cfg := &codeexec.Config{}
	if providersFile != "" {
		data, err := os.ReadFile(providersFile) //nolint:gosec // G304: the operator names the providers config file
		if err != nil {
			return contracts.Errorf(contracts.CodeInvalidInput, "--providers-config: %v", err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(cfg); err != nil {
			return contracts.Errorf(contracts.CodeInvalidInput, "--providers-config %s: %v", providersFile, err)
		}
	}
	cfg.Logger = g.log
	cfg.OnBreakerChange = func(c codeexec.BreakerChange) {
		g.log.Warn("provider breaker", slog.String("provider", c.Provider), slog.String("model", c.Model),
			slog.String("from", string(c.From)), slog.String("to", string(c.To)))
		// Runs under the breaker's lock: publish without waiting.
		if data, err := json.Marshal(breakerEvent(c)); err == nil {
			_ = publish(g.subjects().Prefix+".system.breakers."+c.Provider, data)
		}
	}
	ce, err := codeexec.NewCodeExecution(cfg)
	if err != nil {
		return fmt.Errorf("code_execution: %w", err)
	}
	return w.Register(codeexec.ToolName, worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
		res, err := ce.Handle(ctx, job)
		if err == nil {
			return res, nil
		}
		var cerr *contracts.Error
		if errors.As(err, &cerr) && !cerr.Retryable {
			return nil, worker.Permanent(err)
		}
		if d := codeexec.RetryAfter(err); d > 0 {
			return nil, worker.RetryAfter(d, err)
		}
		return nil, err
	}), &worker.ToolConfig{
		Ready:   ce.Accepting,
		Timeout: 5 * time.Minute,
		Catalog: &contracts.CatalogTool{
			Label:       "Remote code execution",
			Description: "Run an analysis task in a model provider's server-side Python sandbox (xAI, OpenAI, Gemini, Anthropic) and return its answer, the executed code and its output.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"task":{"type":"string"},"provider":{"type":"string","enum":["xai","openai","gemini","anthropic"]},"model":{"type":"string"},"maxTurns":{"type":"integer","minimum":1},"timeoutSeconds":{"type":"number","exclusiveMinimum":0},"failover":{"type":"array","items":{"type":"string"}}},"required":["task"]}`),
		},
	})
}

// breakerEvent is the CloudEvent published when a provider's breaker changes
// state, on <prefix>.system.breakers.<provider>.
func breakerEvent(c codeexec.BreakerChange) map[string]any {
	return map[string]any{
		"specversion":     "1.0",
		"type":            "toolq.provider.breaker_changed",
		"source":          "/toolq/providers/" + c.Provider,
		"id":              fmt.Sprintf("%s/%s/%d", c.Provider, c.Model, c.At.UnixNano()),
		"time":            c.At.UTC(),
		"datacontenttype": "application/json",
		"data":            c,
	}
}
