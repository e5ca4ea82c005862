package cli

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/codeexec"
	"github.com/toolq/toolq/tools/codeexec/demo"
)

// startDemoProvider starts dev's demo provider, a local stand-in for xAI's
// Responses API that calls no model, and points f's code_execution at it.
// The returned stop ends it.
func startDemoProvider(ctx context.Context, g *globals, f *workerFlags) (stop func(), err error) {
	if f.providersConfig != "" {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "--demo-provider and --providers-config exclude each other: the demo provider is the only provider")
	}
	s, err := demo.NewServer(&demo.Config{Logger: g.log})
	if err != nil {
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	f.demo = s
	g.log.Info("demo provider started: code_execution calls no model", slog.String("url", s.URL()))
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.Stop(sctx)
	}, nil
}

// useDemoProvider makes the demo server cfg's only provider: xai's client
// with the server's URL and key; the other providers are off, so no job
// reaches a real API whatever keys the environment holds.
func useDemoProvider(cfg *codeexec.Config, s *demo.Server) {
	off := false
	cfg.Providers = map[string]*codeexec.ProviderConfig{
		codeexec.XAI:       {APIKey: s.APIKey(), BaseURL: s.URL()},
		codeexec.OpenAI:    {Enabled: &off},
		codeexec.Gemini:    {Enabled: &off},
		codeexec.Anthropic: {Enabled: &off},
	}
	cfg.DefaultProvider = codeexec.XAI
}

// printDemoHelp prints the banner line of dev's demo provider.
func printDemoHelp(g *globals, f *workerFlags) {
	if f.demo == nil {
		return
	}
	fmt.Fprintf(g.stderr, "toolq dev: demo provider at %s answers code_execution with a canned result (no model is called):\n", f.demo.URL())
	fmt.Fprintf(g.stderr, "toolq dev:   toolq submit --tool code_execution --input @examples/code_execution/task.json --wait\n")
}
