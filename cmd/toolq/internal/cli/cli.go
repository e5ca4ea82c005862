// Package cli implements the toolq command line.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/toolq/toolq/contracts"
)

// globals are the flags every command shares.
type globals struct {
	natsURL  string
	prefix   string
	jsonOut  bool
	logLevel string
	timeout  time.Duration
	auth     authFlags
	// tenantAccount says the user is a tenant's (deploy/nats/tenants.conf).
	tenantAccount bool

	stdout io.Writer
	stderr io.Writer
	log    *slog.Logger
}

// Main runs the command line with args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	return mainIO(args, os.Stdin, stdout, stderr)
}

// mainIO is Main reading its confirmations from stdin.
func mainIO(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot(stdout, stderr)
	root.SetIn(stdin)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "toolq:", err)
		var ce *contracts.Error
		if errors.As(err, &ce) && ce.Code == contracts.CodeInvalidInput {
			return 2
		}
		return 1
	}
	return 0
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "toolq",
		Short: "Run AI-agent tool calls as jobs on NATS JetStream",
		Long: `toolq runs AI-agent tool calls as jobs. Requesters publish tool-call jobs to
NATS JetStream; workers run them and publish their events back.

Start a development bus with a worker:   toolq dev
Submit a job and wait for its result:    toolq submit --tool noop --input '{"hi":1}' --wait`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
				return contracts.Errorf(contracts.CodeInvalidInput, "--log-level %q: want debug, info, warn or error", g.logLevel)
			}
			g.log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
			if g.prefix != contracts.DefaultPrefix && !contracts.ValidID(g.prefix) {
				return contracts.Errorf(contracts.CodeInvalidInput, "--prefix %q is not a valid subject token", g.prefix)
			}
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&g.natsURL, "nats", envOr("TOOLQ_NATS", nats.DefaultURL), "NATS server URL (env TOOLQ_NATS)")
	pf.StringVar(&g.prefix, "prefix", contracts.DefaultPrefix, "subject prefix of the deployment")
	pf.BoolVar(&g.jsonOut, "json", false, "print machine-readable JSON")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	pf.DurationVar(&g.timeout, "timeout", 30*time.Second, "how long a client command waits")
	g.auth.register(pf)
	pf.BoolVar(&g.tenantAccount, "tenant-account", os.Getenv("TOOLQ_TENANT_ACCOUNT") != "",
		"the user is a tenant's account (deploy/nats/tenants.conf): follow events by subscription (env TOOLQ_TENANT_ACCOUNT)")

	root.AddCommand(
		newDevCmd(g),
		newWorkerCmd(g),
		newSubmitCmd(g),
		newEventsCmd(g),
		newCancelCmd(g),
		newBenchCmd(g),
		newSchedulerCmd(g), newScheduleCmd(g),
		newExecCmd(g),
		newWaitCmd(g),
		newRunsCmd(g),
		newApproveCmd(g), newDenyCmd(g),
		newTenantCmd(g),
	)
	return root
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func (g *globals) subjects() contracts.Subjects { return contracts.Subjects{Prefix: g.prefix} }

func (g *globals) connect(name string) (*nats.Conn, error) {
	auth, err := g.auth.options()
	if err != nil {
		return nil, err
	}
	opts := append([]nats.Option{nats.Name(name), nats.Timeout(5 * time.Second), nats.MaxReconnects(-1)}, auth...)
	nc, err := nats.Connect(g.natsURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redactURL(g.natsURL), err)
	}
	return nc, nil
}

// printJSON writes v as indented JSON.
func (g *globals) printJSON(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // a person reads it: "<" stays "<", not \u003c
	return enc.Encode(v)
}

// readInput reads a JSON argument given inline, as @file, or as @- (stdin).
func readInput(s string, stdin io.Reader) (json.RawMessage, error) {
	if s == "" {
		return nil, nil
	}
	var data []byte
	switch {
	case s == "@-":
		b, err := io.ReadAll(io.LimitReader(stdin, 8<<20))
		if err != nil {
			return nil, err
		}
		data = b
	case strings.HasPrefix(s, "@"):
		b, err := os.ReadFile(s[1:])
		if err != nil {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "--input %s: %v", s, err)
		}
		data = b
	default:
		data = []byte(s)
	}
	if !json.Valid(data) {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "--input is not valid JSON")
	}
	return json.RawMessage(strings.TrimSpace(string(data))), nil
}
