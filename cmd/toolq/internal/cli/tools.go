package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/codeexec"
)

// codeExecConfig reads --providers-config (if any) and publishes provider
// breaker changes as events on <prefix>.system.breakers.<provider>.
func codeExecConfig(g *globals, publish func(subject string, data []byte) error, providersFile string) (*codeexec.Config, error) {
	cfg := &codeexec.Config{}
	if providersFile != "" {
		data, err := os.ReadFile(providersFile) //nolint:gosec // G304: the operator names the providers config file
		if err != nil {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "--providers-config: %v", err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(cfg); err != nil {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "--providers-config %s: %v", providersFile, err)
		}
	}
	cfg.Logger = g.log
	cfg.OnBreakerChange = func(c codeexec.BreakerChange) {
		g.log.Warn("provider breaker", slog.String("provider", c.Provider), slog.String("model", c.Model),
			slog.String("from", string(c.From)), slog.String("to", string(c.To)))
		// Runs under the breaker's lock: publish without waiting.
		if data, err := json.Marshal(breakerEvent(c)); err == nil {
			_ = publish(g.subjects().Breaker(c.Provider), data)
		}
	}
	return cfg, nil
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
