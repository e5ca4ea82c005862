// Package exampletest assembles, for the examples' tests, the worker side
// that `toolq dev` runs: a worker with code mode, the approval-gated exec
// tool and code_execution against the demo provider, built from the
// public packages (worker, sandbox, shell, tools/...). The examples
// themselves are requesters and never import it.
package exampletest

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/tools/codeexec"
	"github.com/toolq/toolq/tools/codeexec/demo"
	"github.com/toolq/toolq/tools/codemode"
	"github.com/toolq/toolq/tools/shellexec"
	"github.com/toolq/toolq/worker"
)

// Config says which tools the worker runs besides code mode.
type Config struct {
	// Exec adds the exec tool (and exec.decide) with dev's default
	// policy (a small allowlist, ask on a miss, the bubblewrap sandbox),
	// deciding with Approvers; code-mode runs may call it when they name
	// it (codemode.Config.ShellExec).
	Exec      bool
	Approvers []string
	// DemoProvider adds code_execution answered by the demo provider.
	DemoProvider bool
	// Builtins adds noop and sleep.
	Builtins bool
	// Concurrency of each tool; the worker's default when zero.
	Concurrency int
	// Observer sees every delivery (the tests count executions with it).
	Observer worker.Observer
}

// Quiet is a logger that drops everything.
var Quiet = slog.New(slog.DiscardHandler)

// StartWorker starts a worker on nc with code mode and what cfg asks for,
// stopped when the test ends.
func StartWorker(tb testing.TB, nc *nats.Conn, cfg *Config) *worker.Worker {
	tb.Helper()
	var c Config
	if cfg != nil {
		c = *cfg
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := worker.New(nc, &worker.Config{
		Logger: Quiet, Builtins: c.Builtins, Observer: c.Observer,
		Tool: worker.ToolConfig{Concurrency: c.Concurrency},
	})
	must(tb, err)
	engine, err := sandbox.NewEngine(ctx, &sandbox.EngineConfig{SnapshotKey: []byte("examples' tests: 32 bytes of key")})
	must(tb, err)
	tb.Cleanup(func() { _ = engine.Close(context.Background()) })
	_, err = codemode.Register(w, nc, &codemode.Config{Engine: engine, Logger: Quiet, ShellExec: c.Exec})
	must(tb, err)
	if c.Exec {
		_, err = shellexec.Register(w, nc, &shellexec.Config{
			Policy: DevPolicy(), Approvers: c.Approvers, Logger: Quiet,
			Runner: shell.RunnerConfig{ScratchDir: tb.TempDir()},
		})
		must(tb, err)
	}
	if c.DemoProvider {
		s, err := demo.NewServer(&demo.Config{Logger: Quiet})
		must(tb, err)
		must(tb, s.Start(ctx))
		tb.Cleanup(func() { _ = s.Stop(context.Background()) })
		off := false
		_, err = codeexec.Register(w, &codeexec.Config{
			Providers: map[string]*codeexec.ProviderConfig{
				codeexec.XAI:       {APIKey: s.APIKey(), BaseURL: s.URL()},
				codeexec.OpenAI:    {Enabled: &off},
				codeexec.Gemini:    {Enabled: &off},
				codeexec.Anthropic: {Enabled: &off},
			},
			DefaultProvider: codeexec.XAI,
			Getenv:          func(string) string { return "" },
			Logger:          Quiet,
		})
		must(tb, err)
	}
	must(tb, w.Start(ctx))
	tb.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	return w
}

// DevPolicy is `toolq dev`'s default exec policy: a few harmless binaries
// and stdin-only filters run without asking, everything else asks.
func DevPolicy() shell.Policy {
	p := shell.Policy{
		Security: shell.SecurityAllowlist, Ask: shell.AskOnMiss,
		SafeBins: []string{"grep", "sort", "head", "tail", "wc", "cut", "tr", "uniq", "sha256sum"},
	}
	for _, name := range []string{"echo", "ls", "pwd", "date", "true", "false", "seq", "basename", "dirname"} {
		if path, ok := p.LookPath(name); ok {
			p.Allowlist = append(p.Allowlist, path)
		}
	}
	return p
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// Deliveries is a worker.Observer that counts the deliveries each tool's
// jobs got: a test that sees one per job knows no job ran twice.
type Deliveries struct {
	mu sync.Mutex
	n  map[string]*atomic.Int64
}

// Tool implements worker.Observer.
func (d *Deliveries) Tool(tool, _ string) worker.ToolObserver {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == nil {
		d.n = map[string]*atomic.Int64{}
	}
	if d.n[tool] == nil {
		d.n[tool] = &atomic.Int64{}
	}
	return toolDeliveries{d.n[tool]}
}

// Lag implements worker.Observer.
func (*Deliveries) Lag([]worker.ConsumerLag) {}

// Of returns how many deliveries tool's jobs got.
func (d *Deliveries) Of(tool string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n[tool] == nil {
		return 0
	}
	return d.n[tool].Load()
}

type toolDeliveries struct{ n *atomic.Int64 }

func (t toolDeliveries) Started(int, time.Duration)        { t.n.Add(1) }
func (toolDeliveries) Ended(worker.Outcome, time.Duration) {}
func (toolDeliveries) DeadLettered()                       {}
