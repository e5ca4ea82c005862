package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/toolq/toolq/cmd/toolq/internal/operator"
	"github.com/toolq/toolq/cmd/toolq/internal/ui"
	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/embedded"
	"github.com/toolq/toolq/metrics"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/scheduler"
	"github.com/toolq/toolq/tools/codeexec"
	"github.com/toolq/toolq/tools/codeexec/demo"
	"github.com/toolq/toolq/tools/codemode"
	"github.com/toolq/toolq/tools/shellexec"
	"github.com/toolq/toolq/tracing"
	"github.com/toolq/toolq/worker"
)

type workerFlags struct {
	name            string
	concurrency     int
	replicas        int
	stopTimeout     time.Duration
	snapshotKeyFile string
	snapshotKeyID   string
	snapshotVerify  []string
	noCodeMode      bool
	codeModeLimits  string
	tools           []string
	codeModeExec    bool
	builtins        bool
	tenants         bool
	sessionLanes    bool
	tenantQueue     int64
	tenantSuspended int
	maxQueueTime    time.Duration
	catalogTTL      time.Duration
	mcpConfig       string
	exec            execFlags
	ackWait         time.Duration
	leaseTTL        time.Duration
	concLeaseTTL    time.Duration
	providersConfig string
	// demo is dev's demo provider (--demo-provider), the only provider
	// of code_execution when set.
	demo    *demo.Server
	metrics metricsFlags
	// obs is the command's metrics (nil without --metrics-listen), set
	// before the node is made.
	obs     *metrics.Metrics
	tracing tracingFlags
	// tracer is the command's tracer (nil without --otlp-endpoint), set
	// before the node is made.
	tracer *tracing.Tracer
}

func (f *workerFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.name, "name", "", "worker name (default: hostname and a random suffix)")
	cmd.Flags().IntVar(&f.concurrency, "concurrency", 16, "jobs of each tool run at once")
	cmd.Flags().IntVar(&f.replicas, "replicas", 1, "stream replicas (3 in a cluster)")
	cmd.Flags().DurationVar(&f.stopTimeout, "stop-timeout", 30*time.Second, "how long a stop lets running jobs finish")
	cmd.Flags().StringVar(&f.providersConfig, "providers-config", "", "JSON file configuring code_execution's providers (keys, base URLs, models, retries, breakers)")
	cmd.Flags().DurationVar(&f.ackWait, "ack-wait", 30*time.Second, "how long a job may go without a heartbeat before another worker takes it")
	cmd.Flags().DurationVar(&f.leaseTTL, "lease-ttl", 30*time.Second, "how long a code-mode resume may hold a run before another worker takes it over")
	cmd.Flags().DurationVar(&f.concLeaseTTL, "concurrency-lease-ttl", 30*time.Second, "how long a dead worker's slot of a concurrency key stays held (the TTL of the concurrency bucket, set by the first worker that makes it)")
	cmd.Flags().StringVar(&f.snapshotKeyFile, "snapshot-key-file", "", "key that signs code-mode snapshots, shared by every worker (or env TOOLQ_SNAPSHOT_KEY, hex)")
	cmd.Flags().StringVar(&f.snapshotKeyID, "snapshot-key-id", os.Getenv("TOOLQ_SNAPSHOT_KEY_ID"), "id of the snapshot key, written in every snapshot (default: derived from the key; env TOOLQ_SNAPSHOT_KEY_ID)")
	cmd.Flags().StringArrayVar(&f.snapshotVerify, "snapshot-verify-key-file", nil, "an older snapshot key still accepted for resumes, as [ID=]FILE (repeatable; for key rotation)")
	cmd.Flags().BoolVar(&f.noCodeMode, "no-code-mode", false, "do not run code-mode jobs on this worker")
	cmd.Flags().StringVar(&f.codeModeLimits, "codemode-limits", "", `code-mode limits on this worker as JSON, @file or a file path: {"defaults": {...}, "max": {...}}, fields as a job's limits (timeoutMs, memoryLimitBytes, maxOutputBytes, maxSnapshotBytes, maxPendingToolCalls, maxTotalCpuMs, ...); a job may ask up to max (default: the defaults)`)
	cmd.Flags().StringSliceVar(&f.tools, "tools", nil, "serve exactly these tool packs: code_execution, code_mode, exec, mcp (comma-separated or repeated; default: every pack the --no-* flags leave on)")
	cmd.Flags().BoolVar(&f.codeModeExec, "codemode-exec", false, "let code-mode runs call the shell exec tool (toolq:core:exec), when the run's tools name it; off by default")
	cmd.Flags().BoolVar(&f.builtins, "builtins", false, "also run the diagnostic tools noop and sleep (always on in dev)")
	cmd.Flags().BoolVar(&f.tenants, "tenants", os.Getenv("TOOLQ_TENANTS") != "",
		"also serve the registered tenants (toolq tenant register) of a server like deploy/nats/tenants.conf (env TOOLQ_TENANTS)")
	cmd.Flags().BoolVar(&f.sessionLanes, "session-lanes", os.Getenv("TOOLQ_SESSION_LANES") != "",
		"keep sessions' lanes apart: a consumer a tool, level and lane, so one session's backlog delays only the sessions of its lane (4 times the consumers; every worker of a deployment alike; env TOOLQ_SESSION_LANES)")
	cmd.Flags().Int64Var(&f.tenantQueue, "tenant-queue-limit", 0, "queued jobs a tenant may have over all tools, unless registered with its own --queue-limit (default 10000)")
	cmd.Flags().IntVar(&f.tenantSuspended, "tenant-suspended-limit", 0, "code-mode runs a named tenant may have waiting at once, over all its sessions (default 1000)")
	cmd.Flags().DurationVar(&f.catalogTTL, "catalog-ttl", 0, "how long this worker's catalog entries outlive it; written again every third of it (default 1m30s, at least 1s; negative: entries never expire)")
	cmd.Flags().DurationVar(&f.maxQueueTime, "max-queue-time", 0, "how long a job of a tool no worker serves waits before it is dead-lettered with a failed event (default 15m; negative: never)")
	addMCPFlag(cmd, &f.mcpConfig)
	f.exec.register(cmd)
	f.metrics.register(cmd)
	f.tracing.register(cmd)
}

// node is a worker with every tool this binary has, code mode included.
// Code mode, exec and the MCP servers are the worker's extensions: starting
// and stopping the worker starts and stops them.
type node struct {
	w      *worker.Worker
	cm     *codemode.CodeMode
	engine *sandbox.Engine
	exec   *shellexec.ShellExec
}

// newWorker builds a worker with every tool this binary has.
func newWorker(g *globals, nc *nats.Conn, f *workerFlags) (*worker.Worker, error) {
	n, err := newNode(context.Background(), g, nc, f)
	if err != nil {
		return nil, err
	}
	return n.w, nil
}

func newNode(ctx context.Context, g *globals, nc *nats.Conn, f *workerFlags) (*node, error) {
	packs, err := selectPacks(f.tools, f.noCodeMode, f.exec.off, f.mcpConfig)
	if err != nil {
		return nil, err
	}
	wcfg := &worker.Config{
		Name: f.name, Subjects: g.subjects(), Replicas: f.replicas, StopTimeout: f.stopTimeout,
		Logger: g.log, Tool: worker.ToolConfig{Concurrency: f.concurrency, AckWait: f.ackWait},
		Builtins: f.builtins, Tenants: f.tenants, TenantQueueLimit: f.tenantQueue, MaxQueueTime: f.maxQueueTime,
		CatalogTTL: f.catalogTTL, ConcurrencyLeaseTTL: f.concLeaseTTL, SessionLanes: f.sessionLanes,
	}
	if f.obs != nil {
		wcfg.Observer = f.obs.Worker()
	}
	if f.tracer != nil {
		wcfg.Tracer = f.tracer
	}
	w, err := worker.New(nc, wcfg)
	if err != nil {
		return nil, err
	}
	if packs[packCodeExecution] {
		if err := registerCodeExecution(g, w, nc, f); err != nil {
			return nil, err
		}
	}
	n := &node{w: w}
	if packs[packExec] {
		if n.exec, err = registerExec(g, w, nc, f); err != nil {
			return nil, err
		}
	}
	if packs[packCodeMode] {
		if err := n.registerCodeMode(ctx, g, nc, f); err != nil {
			return nil, err
		}
	}
	// Last: the servers are connected from here on, and a failure before
	// would leave them so.
	if packs[packMCP] {
		if err := registerMCP(ctx, g, w, f.mcpConfig); err != nil {
			return nil, n.close(ctx, err)
		}
	}
	return n, nil
}

// registerCodeExecution adds code_execution with its providers' config
// (or dev's demo provider), its breakers reported to the metrics.
func registerCodeExecution(g *globals, w *worker.Worker, nc *nats.Conn, f *workerFlags) error {
	cfg, err := codeExecConfig(g, nc.Publish, f.providersConfig)
	if err != nil {
		return err
	}
	if f.demo != nil {
		useDemoProvider(cfg, f.demo)
	}
	if f.obs != nil {
		logged, m := cfg.OnBreakerChange, f.obs
		cfg.OnBreakerChange = func(c codeexec.BreakerChange) {
			m.BreakerChanged(c.Provider, c.Model, string(c.To))
			logged(c)
		}
	}
	// The breakers' current state, in the breakers bucket for the console.
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	var tool *codeexec.CodeExecution
	board, err := operator.NewBreakerBoard(js, &operator.BreakerBoardConfig{
		Subjects: g.subjects(), Replicas: f.replicas, Worker: w.Name(), Logger: g.log,
		States: func() map[string]map[string]string { return breakerStates(tool) },
	})
	if err != nil {
		return err
	}
	announced := cfg.OnBreakerChange
	cfg.OnBreakerChange = func(c codeexec.BreakerChange) {
		announced(c)
		board.Changed(c.Provider, c.Model, string(c.To), c.At, c.RetryAfterMs)
	}
	if tool, err = codeexec.Register(w, cfg); err != nil {
		return err
	}
	return w.Use(board)
}

// breakerStates is t's breakers now, provider → model → state.
func breakerStates(t *codeexec.CodeExecution) map[string]map[string]string {
	out := map[string]map[string]string{}
	if t == nil {
		return out
	}
	for _, p := range t.Status() {
		if len(p.Breakers) == 0 {
			continue
		}
		m := make(map[string]string, len(p.Breakers))
		for model, st := range p.Breakers {
			m[model] = string(st)
		}
		out[p.Provider] = m
	}
	return out
}

// registerCodeMode adds code mode when the worker has a snapshot key.
func (n *node) registerCodeMode(ctx context.Context, g *globals, nc *nats.Conn, f *workerFlags) error {
	key, err := snapshotKey(f.snapshotKeyFile)
	if err != nil {
		return err
	}
	if key == nil {
		g.log.Warn("code mode is off on this worker: no snapshot key (--snapshot-key-file or TOOLQ_SNAPSHOT_KEY)")
		return nil
	}
	// Fail closed: a worker asked to run code mode without its runtime
	// does not start.
	verify, err := verifyKeys(f.snapshotVerify)
	if err != nil {
		return err
	}
	ecfg := &sandbox.EngineConfig{SnapshotKey: key, SnapshotKeyID: f.snapshotKeyID, SnapshotVerifyKeys: verify}
	if f.obs != nil {
		ecfg.Observer = f.obs.CodeMode() // the VM pool and snapshot restores
	}
	if n.engine, err = sandbox.NewEngine(ctx, ecfg); err != nil {
		return fmt.Errorf("code mode: %w", err)
	}
	ccfg := &codemode.Config{
		Engine: n.engine, Subjects: g.subjects(), Replicas: f.replicas, Logger: g.log, LeaseTTL: f.leaseTTL,
		ShellExec: f.codeModeExec, MaxSuspendedPerTenant: f.tenantSuspended,
	}
	if f.codeModeLimits != "" {
		l, err := parseCodeModeLimits(f.codeModeLimits)
		if err != nil {
			return n.close(ctx, err)
		}
		ccfg.Limits, ccfg.MaxLimits = l.Defaults, l.Max
	}
	if f.obs != nil {
		ccfg.Observer = f.obs.CodeMode()
	}
	n.cm, err = codemode.Register(n.w, nc, ccfg)
	return err
}

// start starts the worker and with it its extensions; a failed start
// leaves none of them running.
func (n *node) start(ctx context.Context) error { return n.w.Start(ctx) }

// stop stops the worker (and with it its extensions), then closes the
// sandbox engine its code mode ran on.
func (n *node) stop(ctx context.Context) error {
	return n.close(ctx, n.w.Stop(ctx))
}

// close closes the sandbox engine, if any, and joins its error to err.
func (n *node) close(ctx context.Context, err error) error {
	if n.engine != nil {
		err = errors.Join(err, n.engine.Close(ctx))
	}
	return err
}

// snapshotKey reads the snapshot-signing key: a file (raw bytes, or hex)
// or TOOLQ_SNAPSHOT_KEY (hex). nil when neither is set.
func snapshotKey(file string) ([]byte, error) {
	var raw []byte
	switch {
	case file != "":
		b, err := os.ReadFile(file) //nolint:gosec // G304: the operator names the key file
		if err != nil {
			return nil, fmt.Errorf("snapshot key: %w", err)
		}
		raw = bytes.TrimSpace(b)
	case os.Getenv("TOOLQ_SNAPSHOT_KEY") != "":
		raw = []byte(strings.TrimSpace(os.Getenv("TOOLQ_SNAPSHOT_KEY")))
	default:
		return nil, nil
	}
	if k, err := hex.DecodeString(string(raw)); err == nil {
		raw = k
	}
	if len(raw) < 32 {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "snapshot key must be at least 32 bytes (64 hex digits)")
	}
	return raw, nil
}

// verifyKeys reads older snapshot keys given as [ID=]FILE.
func verifyKeys(specs []string) ([]sandbox.SnapshotKey, error) {
	out := make([]sandbox.SnapshotKey, 0, len(specs))
	for _, spec := range specs {
		id, file, ok := strings.Cut(spec, "=")
		if !ok {
			id, file = "", spec
		}
		if file == "" {
			return nil, fmt.Errorf("snapshot verify key %q: want [ID=]FILE", spec)
		}
		key, err := snapshotKey(file)
		if err != nil {
			return nil, err
		}
		out = append(out, sandbox.SnapshotKey{ID: id, Key: key})
	}
	return out, nil
}

// devSnapshotKey returns the dev bus's snapshot key file, creating a random
// key the first time.
func devSnapshotKey(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "snapshot.key")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, []byte(hex.EncodeToString(k)+"\n"), 0o600)
}

// serve starts n and runs it until ctx ends, then stops it gracefully;
// readiness (nil for none) hears true once n has started (streams ensured,
// consumers pulling, the engine loaded) and false when the stop begins.
func serve(ctx context.Context, g *globals, n *node, f *workerFlags, readiness func(started bool)) error {
	if err := n.start(ctx); err != nil {
		return n.close(context.WithoutCancel(ctx), err)
	}
	if readiness != nil {
		readiness(true)
	}
	<-ctx.Done()
	if readiness != nil {
		readiness(false)
	}
	g.log.Info("stopping worker")
	// ctx has ended: the graceful stop gets its own deadline.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.stopTimeout+5*time.Second)
	defer cancel()
	return n.stop(sctx)
}

func newWorkerCmd(g *globals) *cobra.Command {
	f := &workerFlags{}
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a worker against a NATS server",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, err := g.connect("toolq worker")
			if err != nil {
				return err
			}
			defer nc.Close()
			ms, err := f.metrics.start(g)
			if err != nil {
				return err
			}
			defer ms.stop()
			f.obs = ms.metrics()
			if f.tracer, err = f.tracing.start(cmd.Context(), g); err != nil {
				return err
			}
			defer stopTracer(g, f.tracer)
			n, err := newNode(cmd.Context(), g, nc, f)
			if err != nil {
				return err
			}
			g.log.Info("worker connected", slog.String("nats", redactURL(g.natsURL)), slog.String("name", n.w.Name()), slog.Any("tools", n.w.Tools()))
			return serve(cmd.Context(), g, n, f, func(started bool) {
				if started {
					ms.ready(nc)
				} else {
					ms.notReady("stopping")
				}
			})
		},
	}
	f.register(cmd)
	return cmd
}

func newDevCmd(g *globals) *cobra.Command {
	f := &workerFlags{}
	var (
		listen, dataDir string
		once, logs      bool
		demoProvider    bool
		console         uiFlags
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run an embedded NATS server with JetStream and a worker with every tool",
		Long: `dev starts a nats-server with JetStream inside this process (data kept in
--data across restarts), creates toolq's streams, starts a worker with every
tool, runs one noop job through it as a self-check, and serves until
interrupted. Other toolq commands and any NATS client connect to --listen.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := os.MkdirAll(dataDir, 0o750); err != nil {
				return fmt.Errorf("data dir: %w", err)
			}
			srv, err := embedded.Start(&embedded.Config{Listen: listen, StoreDir: dataDir, Logs: logs, Logger: g.log})
			if err != nil {
				return err
			}
			defer srv.Stop()
			nc, err := srv.Connect(nats.Name("toolq dev worker"))
			if err != nil {
				return err
			}
			defer nc.Close()
			if f.snapshotKeyFile == "" && os.Getenv("TOOLQ_SNAPSHOT_KEY") == "" {
				if f.snapshotKeyFile, err = devSnapshotKey(dataDir); err != nil {
					return err
				}
			}
			devApproverSeed(f, dataDir)
			if demoProvider {
				stop, err := startDemoProvider(ctx, g, f)
				if err != nil {
					return err
				}
				defer stop()
			}
			f.builtins = true // the self-check runs noop
			ms, err := f.metrics.start(g)
			if err != nil {
				return err
			}
			defer ms.stop()
			f.obs = ms.metrics()
			if f.tracer, err = f.tracing.start(ctx, g); err != nil {
				return err
			}
			defer stopTracer(g, f.tracer)
			n, err := newNode(ctx, g, nc, f)
			if err != nil {
				return err
			}
			if err := n.start(ctx); err != nil {
				return err
			}
			// The NATS-native scheduler: delayed and periodic jobs with no
			// other service.
			scfg := &scheduler.NATSConfig{Subjects: g.subjects(), Logger: g.log}
			if ms != nil {
				scfg.Observer = ms.m.Scheduler()
			}
			if f.tracer != nil {
				scfg.Tracer = f.tracer
			}
			sched, err := scheduler.NewNATS(nc, scfg)
			if err != nil {
				_ = n.stop(context.Background())
				return err
			}
			if err := sched.Start(ctx); err != nil {
				_ = n.stop(context.Background())
				return fmt.Errorf("scheduler: %w", err)
			}
			defer func() {
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = sched.Stop(sctx)
			}()
			// The web console, on the worker's connection (the toolq
			// account). A dev bus serves on without it when its port is
			// taken (another dev running).
			var con *ui.Server
			if console.listen != "" {
				hint := f.exec.approverSeed
				if abs, err := filepath.Abs(hint); err == nil && hint != "" {
					hint = abs
				}
				if con, err = console.start(ctx, g, nc, hint); err != nil {
					g.log.Warn("web console not started", slog.Any("err", err))
				}
				defer stopUI(con)
			}
			ms.ready(nc)
			w := n.w
			abs, _ := filepath.Abs(dataDir)
			if g.jsonOut {
				// stderr carries JSON only: the banner is one log record.
				attrs := []any{
					slog.String("nats", srv.URL()), slog.String("data", abs),
					slog.String("worker", w.Name()), slog.Any("tools", w.Tools()), slog.String("approver_seed", f.exec.approverSeed),
				}
				if ms != nil {
					attrs = append(attrs, slog.String("metrics", ms.srv.URL()))
				}
				if con != nil {
					attrs = append(attrs, slog.String("console", con.URL()))
				}
				g.log.Info("toolq dev ready", attrs...)
			} else {
				fmt.Fprintf(g.stderr, "toolq dev: NATS with JetStream at %s (data in %s)\n", srv.URL(), abs)
				fmt.Fprintf(g.stderr, "toolq dev: worker %s runs %v\n", w.Name(), w.Tools())
				fmt.Fprintf(g.stderr, "toolq dev: connect with  export TOOLQ_NATS=%s\n", srv.URL())
				fmt.Fprintf(g.stderr, "toolq dev: then try      toolq submit --tool noop --input '{\"hello\":\"toolq\"}' --wait\n")
				if ms != nil {
					fmt.Fprintf(g.stderr, "toolq dev: metrics at    %s\n", ms.srv.URL())
				}
				if con != nil {
					fmt.Fprintf(g.stderr, "toolq dev: web console   %s\n", con.URL())
				}
				printExecHelp(g, f)
				printDemoHelp(g, f)
			}

			if err := selfCheck(ctx, g, srv, n.cm != nil); err != nil {
				_ = n.stop(context.Background())
				return fmt.Errorf("self-check: %w", err)
			}
			if !once {
				<-ctx.Done()
			}
			sctx, cancel := context.WithTimeout(context.Background(), f.stopTimeout+5*time.Second)
			defer cancel()
			return n.stop(sctx)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:4222", "address the embedded server listens on")
	cmd.Flags().StringVar(&dataDir, "data", ".toolq/dev", "JetStream data directory, kept across restarts")
	cmd.Flags().BoolVar(&once, "once", false, "exit after the self-check job instead of serving")
	cmd.Flags().BoolVar(&logs, "server-logs", false, "print the embedded server's logs")
	console.register(cmd, "ui-", "; empty: no console")
	cmd.Flags().BoolVar(&demoProvider, "demo-provider", false,
		"answer code_execution from a local stand-in for xAI's API on 127.0.0.1 that calls no model (canned, labelled results; no key needed)")
	return cmd
}

// selfCheck runs one noop job through the bus and prints its completion event.
func selfCheck(ctx context.Context, g *globals, srv *embedded.Server, codeMode bool) error {
	nc, err := srv.Connect(nats.Name("toolq dev self-check"))
	if err != nil {
		return err
	}
	defer nc.Close()
	p, err := producer.New(nc, &producer.Config{Subjects: g.subjects(), Session: "dev", Logger: g.log})
	if err != nil {
		return err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	job, err := p.Submit(ctx, worker.ToolNoop, []byte(`{"hello":"toolq"}`), nil)
	if err != nil {
		return err
	}
	ev, err := p.Await(ctx, job.Session, job.ID, nil)
	if err != nil {
		return err
	}
	if ev.Data.Status != contracts.StatusCompleted {
		return fmt.Errorf("job %s ended %s", job.ID, ev.Data.Status)
	}
	g.tell("toolq dev: self-check job %s completed:", job.ID)
	if err := g.printJSON(ev); err != nil {
		return err
	}
	if !codeMode {
		return nil
	}
	// Code mode: guest code whose nested call is a queued job; the run
	// suspends to NATS while it is pending and resumes when it is back.
	run, err := p.SubmitCode(ctx, &contracts.CodeModeExecInput{
		Code:       `const echo = await tools.callValue("toolq:core:noop", {hello: "code mode"}); text("nested call came back"); return {echo, tools: ALL_TOOLS.length};`,
		AutoResume: true,
	}, nil)
	if err != nil {
		return err
	}
	ev, err = p.Await(ctx, run.Session, run.ID, nil)
	if err != nil {
		return err
	}
	if ev.Data.Status != contracts.StatusCompleted {
		b, _ := json.Marshal(ev.Data)
		return fmt.Errorf("code-mode run %s ended %s: %s", run.ID, ev.Data.Status, b)
	}
	g.tell("toolq dev: self-check code-mode run %s (suspended on a nested job, resumed) completed:", run.ID)
	return printRaw(g, ev.Data.Result)
}
