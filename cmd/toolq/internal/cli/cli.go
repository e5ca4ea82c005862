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
	"runtime/pprof"
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
	// logFormat is --log-format: json or text; "" follows --json.
	logFormat string
	timeout   time.Duration
	auth      authFlags
	// tenantAccount says the user is a tenant's (deploy/nats/tenants.conf).
	tenantAccount bool
	// cpuProfile is --cpuprofile: a file the command's CPU profile goes
	// to, written when the command returns.
	cpuProfile  string
	stopProfile func() error

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
	root, g := newRoot(stdout, stderr)
	root.SetIn(stdin)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if g.stopProfile != nil {
		if perr := g.stopProfile(); perr != nil && err == nil {
			err = perr
		}
	}
	if err == nil {
		return 0
	}
	ce, ended := cliError(err)
	if g.jsonOut || jsonArg(args) {
		// One JSON object on one line of stderr; stdout keeps what the
		// command printed before it failed (a failed job's event, say).
		line, _ := json.Marshal(map[string]any{"error": map[string]any{"code": ce.Code, "message": ce.Message}})
		fmt.Fprintln(stderr, string(line))
	} else {
		fmt.Fprintln(stderr, "toolq:", err)
	}
	if !ended && ce.Code == contracts.CodeInvalidInput {
		return 2
	}
	return 1
}

// jobEnded is the error of a command whose job (or run) ended other than
// completed: it carries the job's code for --json, and exits 1 whatever
// the code (2 is for a command given bad input).
type jobEnded struct{ err *contracts.Error }

func (e *jobEnded) Error() string { return e.err.Message }

// endedErr is the error for job id that ended with status and error e.
func endedErr(what, id string, status contracts.Status, e *contracts.Error) error {
	ce := &contracts.Error{Code: contracts.CodeInternalError, Message: fmt.Sprintf("%s %s %s", what, id, status)}
	switch {
	case e != nil:
		ce.Code = e.Code
		ce.Message += ": " + e.Error()
	case status == contracts.StatusCancelled:
		ce.Code = contracts.CodeCancelled
	case status == contracts.StatusDenied:
		ce.Code = contracts.CodeDenied
	}
	return &jobEnded{err: ce}
}

// cliError gives err its code: a job's own (jobEnded), a *contracts.Error
// in the chain, invalid_input for a command line cobra refused, else
// internal_error.
func cliError(err error) (ce *contracts.Error, ended bool) {
	var je *jobEnded
	if errors.As(err, &je) {
		return je.err, true
	}
	if errors.As(err, &ce) {
		return &contracts.Error{Code: ce.Code, Message: err.Error(), Details: ce.Details}, false
	}
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag", "accepts ", "requires at least", "requires at most", "flag needs an argument", "invalid argument"} {
		if strings.HasPrefix(msg, p) {
			return &contracts.Error{Code: contracts.CodeInvalidInput, Message: msg}, false
		}
	}
	return &contracts.Error{Code: contracts.CodeInternalError, Message: msg}, false
}

// jsonArg reports whether --json is among args, for an error found before
// the flags were all parsed.
func jsonArg(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--json" || a == "--json=true" {
			return true
		}
	}
	return false
}

func newRoot(stdout, stderr io.Writer) (*cobra.Command, *globals) {
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
			opts := &slog.HandlerOptions{Level: lvl}
			format := g.logFormat
			if format == "" {
				format = "text"
				if g.jsonOut {
					format = "json"
				}
			}
			switch format {
			case "json":
				g.log = slog.New(slog.NewJSONHandler(stderr, opts))
			case "text":
				g.log = slog.New(slog.NewTextHandler(stderr, opts))
			default:
				return contracts.Errorf(contracts.CodeInvalidInput, "--log-format %q: want json or text", g.logFormat)
			}
			if g.prefix != contracts.DefaultPrefix && !contracts.ValidID(g.prefix) {
				return contracts.Errorf(contracts.CodeInvalidInput, "--prefix %q is not a valid subject token", g.prefix)
			}
			if g.cpuProfile != "" {
				stop, err := startCPUProfile(g.cpuProfile)
				if err != nil {
					return err
				}
				g.stopProfile = stop
			}
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&g.natsURL, "nats", envOr("TOOLQ_NATS", nats.DefaultURL), "NATS server URL (env TOOLQ_NATS)")
	pf.StringVar(&g.prefix, "prefix", contracts.DefaultPrefix, "subject prefix of the deployment")
	pf.BoolVar(&g.jsonOut, "json", false, "print machine-readable JSON: results on stdout, logs and errors ({\"error\":{\"code\",\"message\"}}) on stderr, streams one object per line")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	pf.StringVar(&g.logFormat, "log-format", "", "log format on stderr: json or text (default: json with --json, else text)")
	pf.DurationVar(&g.timeout, "timeout", 30*time.Second, "how long a client command waits")
	g.auth.register(pf)
	pf.StringVar(&g.cpuProfile, "cpuprofile", "", "write the command's CPU profile (pprof) to this file when it ends; a worker's when it stops")
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
		newKeygenCmd(g),
		newToolsCmd(g),
		newMCPCmd(g),
		newDLQCmd(g), newJobsCmd(g), newLimitsCmd(g),
		newUICmd(g),
	)
	return root, g
}

// startCPUProfile profiles this process's CPU into path until the
// returned stop.
func startCPUProfile(path string) (func() error, error) {
	f, err := os.Create(path) //nolint:gosec // G304: the operator's own --cpuprofile path
	if err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "--cpuprofile: %v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// logger is the command's logger (a discarding one before the flags are
// read).
func (g *globals) logger() *slog.Logger {
	if g.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return g.log
}

func (g *globals) subjects() contracts.Subjects { return contracts.Subjects{Prefix: g.prefix} }

func (g *globals) connect(name string) (*nats.Conn, error) {
	auth, err := g.auth.options()
	if err != nil {
		return nil, err
	}
	opts := append([]nats.Option{
		nats.Name(name), nats.Timeout(5 * time.Second), nats.MaxReconnects(-1),
		// nats.go's default prints asynchronous errors on stderr by itself.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			attrs := []any{slog.Any("err", err)}
			if sub != nil {
				attrs = append(attrs, slog.String("subject", sub.Subject))
			}
			g.logger().Warn("nats: asynchronous error", attrs...)
		}),
	}, auth...)
	nc, err := nats.Connect(g.natsURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redactURL(g.natsURL), err)
	}
	return nc, nil
}

// tell writes a line for a person on stderr; with --json it is a JSON
// record ({"time","level","msg"}, whatever --log-level says), so that
// stderr holds JSON only.
func (g *globals) tell(format string, args ...any) {
	msg := strings.TrimSuffix(fmt.Sprintf(format, args...), "\n")
	if g.jsonOut {
		slog.New(slog.NewJSONHandler(g.stderr, nil)).Info(msg)
		return
	}
	fmt.Fprintln(g.stderr, msg)
}

// printLine writes v as JSON on one line: a stream's item.
func (g *globals) printLine(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
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
		b, err := os.ReadFile(s[1:]) //nolint:gosec // G304,G703: the caller names the input file
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
