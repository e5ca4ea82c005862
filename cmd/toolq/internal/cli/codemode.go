package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/tools/codemode"
)

// codeModeResult extracts the CodeModeResult from an exec or wait event: the
// result of a completed or waiting event, the error details of a failed one.
func codeModeResult(ev *contracts.Event) (json.RawMessage, string) {
	if ev.Data.Status == contracts.StatusFailed && ev.Data.Error != nil {
		if len(ev.Data.Error.Details) > 0 {
			return ev.Data.Error.Details, "failed"
		}
		b, _ := json.Marshal(map[string]any{"status": "failed", "error": ev.Data.Error.Message, "code": ev.Data.Error.Code})
		return b, "failed"
	}
	var head struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(ev.Data.Result, &head)
	if head.Status == "" {
		head.Status = string(ev.Data.Status)
	}
	return ev.Data.Result, head.Status
}

func newExecCmd(g *globals) *cobra.Command {
	var (
		codeFile, language, session, tools string
		autoResume, wait, restartSafe      bool
	)
	cmd := &cobra.Command{
		Use:   "exec",
		Short: "Run model-written JavaScript/TypeScript in code mode and print its CodeModeResult",
		Example: `  echo 'return (await tools.callValue("toolq:core:noop", {x: 1})).x + 1' | toolq exec --code - --wait
  toolq exec --code plan.ts --tools toolq:core:noop --auto-resume --wait`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var src []byte
			var err error
			switch codeFile {
			case "":
				return contracts.Errorf(contracts.CodeInvalidInput, "--code FILE or --code - is required")
			case "-":
				src, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 4<<20))
			default:
				src, err = os.ReadFile(codeFile) //nolint:gosec // G304: the user names the code file
			}
			if err != nil {
				return contracts.Errorf(contracts.CodeInvalidInput, "--code: %v", err)
			}
			if !cmd.Flags().Changed("language") {
				language = languageOf(codeFile)
			}
			in := contracts.CodeModeExecInput{Code: string(src), Language: language, AutoResume: autoResume, RestartSafe: restartSafe}
			if tools != "" {
				in.Tools = strings.Split(tools, ",")
			}
			p, closeFn, err := g.producer(session)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx := cmd.Context()
			sctx, cancel := context.WithTimeout(ctx, g.timeout)
			defer cancel()
			job, err := p.SubmitCode(sctx, &in, nil)
			if err != nil {
				return err
			}
			var res json.RawMessage
			var status string
			if wait {
				// Progress on stderr as it happens; the result on stdout.
				prog := newRunProgress(g, p, job.Session, job.ID)
				res, status, err = waitRun(ctx, sctx, g, p, prog, job, autoResume)
				prog.stop()
				if err != nil {
					return err
				}
			} else {
				// The first answer (completed, failed or waiting).
				ev, err := p.Await(sctx, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
				if err != nil {
					return fmt.Errorf("waiting for run %s: %w", job.ID, err)
				}
				res, status = codeModeResult(ev)
			}
			if err := printRaw(g, res); err != nil {
				return err
			}
			if status == "failed" {
				return runFailed(job.ID, res)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&codeFile, "code", "", "file with the code, or - for stdin")
	f.StringVar(&language, "language", contracts.CodeModeJavaScript, "javascript or typescript; by default from the file's extension (.ts, .mts, .cts: typescript)")
	f.StringVar(&session, "session", producer.DefaultSession, "session of the run")
	f.StringVar(&tools, "tools", "", "comma-separated catalog ids the run may use (default: all the workers allow)")
	f.BoolVar(&autoResume, "auto-resume", false, "resume as soon as nested calls are back, without wait")
	f.BoolVar(&restartSafe, "restart-safe", false, "refuse tools with side effects")
	f.BoolVar(&wait, "wait", false, "keep waiting until the run completes or fails, and print that result; its progress (calls waited on, resumes, approvals) goes to stderr")
	return cmd
}

// runFailed is the error of a failed run: the result's code (guest_error
// when the guest's own code failed) and its error text.
func runFailed(runID string, raw json.RawMessage) error {
	var res contracts.CodeModeResult
	_ = json.Unmarshal(raw, &res)
	res.Status = contracts.CodeModeFailed
	var ce *contracts.Error
	_ = errors.As(res.Err(), &ce)
	return endedErr("run", runID, contracts.StatusFailed, ce)
}

// waitRun follows run job until it completes or fails, telling prog each
// answer on the way: an autoResume run by its events (each suspension is a
// waiting event), any other run by a code_mode.wait per suspension.
func waitRun(ctx, sctx context.Context, g *globals, p *producer.Producer, prog *runProgress, job *contracts.Job, autoResume bool) (json.RawMessage, string, error) {
	if autoResume && !g.tenantAccount {
		var (
			res    json.RawMessage
			status string
		)
		errDone := errors.New("run ended")
		err := p.ReadEvents(sctx, job.Session, &producer.ReadOpts{Follow: true, JobID: job.ID}, func(ev *contracts.Event) error {
			if !ev.Data.Status.Terminal() && ev.Data.Status != contracts.StatusWaiting {
				return nil
			}
			res, status = codeModeResult(ev)
			prog.show(ctx, res)
			if status != "waiting" {
				return errDone
			}
			return nil
		})
		if !errors.Is(err, errDone) {
			if err == nil {
				err = sctx.Err()
			}
			return nil, "", fmt.Errorf("waiting for run %s: %w", job.ID, err)
		}
		return res, status, nil
	}
	ev, err := p.Await(sctx, job.Session, job.ID, &producer.AwaitOpts{Parked: !autoResume})
	if err != nil {
		return nil, "", fmt.Errorf("waiting for run %s: %w", job.ID, err)
	}
	res, status := codeModeResult(ev)
	prog.show(ctx, res)
	for status == "waiting" {
		prog.say("resuming run %s once its calls are back (code_mode.wait)", job.ID)
		wev, err := waitOnce(ctx, g, p, job.Session, job.ID)
		if err != nil {
			return nil, "", err
		}
		res, status = codeModeResult(wev)
		prog.show(ctx, res)
	}
	return res, status, nil
}

// waitOnce submits a code_mode.wait job and returns its terminal event.
func waitOnce(ctx context.Context, g *globals, p *producer.Producer, session, runID string) (*contracts.Event, error) {
	sctx, cancel := context.WithTimeout(ctx, g.timeout)
	job, err := p.Wait(sctx, runID, &producer.SubmitOpts{Session: session})
	cancel()
	if err != nil {
		return nil, err
	}
	return p.Await(ctx, session, job.ID, nil)
}

func printRaw(g *globals, raw json.RawMessage) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		_, err := fmt.Fprintln(g.stdout, string(raw))
		return err
	}
	return g.printJSON(v)
}

func newWaitCmd(g *globals) *cobra.Command {
	var session string
	cmd := &cobra.Command{
		Use:   "wait RUN_ID",
		Short: "Resume a waiting code-mode run once its nested calls are back; print the CodeModeResult",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, closeFn, err := g.producer(session)
			if err != nil {
				return err
			}
			defer closeFn()
			if err := contracts.ValidateID("run id", args[0]); err != nil {
				return err
			}
			ev, err := waitOnce(cmd.Context(), g, p, session, args[0])
			if err != nil {
				return err
			}
			res, status := codeModeResult(ev)
			if err := printRaw(g, res); err != nil {
				return err
			}
			if status == "failed" {
				return runFailed(args[0], res)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&session, "session", producer.DefaultSession, "session of the run")
	return cmd
}

func newRunsCmd(g *globals) *cobra.Command {
	var session string
	cmd := &cobra.Command{
		Use:   "runs",
		Short: "List suspended code-mode runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nc, err := g.connect("toolq runs")
			if err != nil {
				return err
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			runs, err := codemode.ListRuns(ctx, js, g.subjects(), session)
			if err != nil {
				return err
			}
			if g.jsonOut {
				if runs == nil {
					runs = []codemode.RunInfo{}
				}
				return g.printJSON(runs)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 2, 2, ' ', 0)
			fmt.Fprintln(tw, "RUN\tSESSION\tSTATUS\tPENDING\tBACK\tSNAPSHOT\tEXPIRES IN")
			for _, r := range runs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%dB\t%s\n", r.RunID, r.Session, r.Status, r.Pending, r.Results, r.Snapshot,
					time.Until(r.Expires).Round(time.Second))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&session, "session", "", "only this session's runs")
	return cmd
}

// languageOf picks the language of a code file from its extension.
func languageOf(file string) string {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".ts", ".mts", ".cts":
		return contracts.CodeModeTypeScript
	}
	return contracts.CodeModeJavaScript
}
