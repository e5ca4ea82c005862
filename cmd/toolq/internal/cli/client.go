package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
)

func (g *globals) producer(session string) (*producer.Producer, func(), error) {
	nc, err := g.connect("toolq client")
	if err != nil {
		return nil, nil, err
	}
	p, err := producer.New(nc, &producer.Config{
		Subjects: g.subjects(), Session: session, Timeout: g.timeout, Logger: g.log,
		TenantAccount: g.tenantAccount,
	})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return p, func() { p.Close(); nc.Close() }, nil
}

func newSubmitCmd(g *globals) *cobra.Command {
	var (
		tool, input, session, id string
		from, priority, ckey     string
		climit                   int
		wait, progress           bool
		timeoutMs                int64
		attempts                 int
	)
	cmd := &cobra.Command{
		Use:   "submit",
		Short: "Submit a job; with --wait, print its terminal event",
		Example: `  toolq submit --tool noop --input '{"a":1}' --wait
  toolq submit --tool sleep --input @job.json --session agent-7
  toolq submit --tool code_mode.exec --input @run.json --priority high
  toolq submit --tool code_execution --input @task.json --concurrency-key repo-42 --concurrency-limit 2
  toolq submit --from jobs.jsonl --tool code_execution   # one job a line: {"input":…} (and id, tool, session, meta)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			prio, err := contracts.ParsePriority(priority)
			if err != nil {
				return err
			}
			var conc *contracts.ConcurrencyLimit
			if ckey != "" || climit != 0 {
				conc = &contracts.ConcurrencyLimit{Key: ckey, Limit: climit}
				if err := conc.Validate(); err != nil {
					return err
				}
			}
			if from != "" {
				if input != "" || id != "" || wait || conc != nil {
					return contracts.Errorf(contracts.CodeInvalidInput, "--from takes its jobs from the file: not with --input, --id, --wait or --concurrency-*")
				}
				p, closeFn, err := g.producer(session)
				if err != nil {
					return err
				}
				defer closeFn()
				return submitFrom(cmd.Context(), g, p, from, batchLine{Tool: tool, Session: session, Priority: string(prio)})
			}
			if tool == "" {
				return contracts.Errorf(contracts.CodeInvalidInput, "required flag(s) \"tool\" not set")
			}
			in, err := readInput(input, cmd.InOrStdin())
			if err != nil {
				return err
			}
			p, closeFn, err := g.producer(session)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			job, err := p.Submit(ctx, tool, in, &producer.SubmitOpts{ID: id, TimeoutMs: timeoutMs, MaxAttempts: attempts, Progress: progress, Priority: prio, Concurrency: conc})
			if err != nil {
				return err
			}
			if !wait {
				if g.jsonOut {
					return g.printJSON(job)
				}
				fmt.Fprintf(g.stdout, "%s\n", job.ID)
				return nil
			}
			ev, err := awaitTelling(ctx, g, p, job)
			if err != nil {
				return err
			}
			if err := g.printJSON(ev); err != nil {
				return err
			}
			if ev.Data.Status != contracts.StatusCompleted {
				return endedErr("job", job.ID, ev.Data.Status, ev.Data.Error)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tool, "tool", "", "tool to run (required, but for --from lines that name theirs)")
	f.StringVar(&input, "input", "", "input JSON, @file or @- for stdin")
	f.StringVar(&session, "session", producer.DefaultSession, "session of the job")
	f.StringVar(&id, "id", "", "job id (default random); resubmitting an id enqueues once")
	f.BoolVar(&wait, "wait", false, "wait for the terminal event and print it")
	f.BoolVar(&progress, "progress", false, "ask for intermediate events")
	f.Int64Var(&timeoutMs, "job-timeout-ms", 0, "timeout of one attempt (default: the tool's)")
	f.IntVar(&attempts, "max-attempts", 0, "most attempts (default: the tool's)")
	f.StringVar(&priority, "priority", "normal", "priority level: high, normal or low (high jobs start before normal ones queued earlier; low ones get at least one slot in five)")
	f.StringVar(&ckey, "concurrency-key", "", "run at most --concurrency-limit jobs of this key (yours; per session, customer, repository…) at once across all workers")
	f.IntVar(&climit, "concurrency-limit", 0, "how many jobs of --concurrency-key may run at once (1-10000)")
	f.StringVar(&from, "from", "", "submit every job of a JSON Lines file (progress on stderr; a rerun goes on where it stopped and submits nothing twice)")
	return cmd
}

func newEventsCmd(g *globals) *cobra.Command {
	var (
		session, job string
		follow       bool
	)
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Print a session's events, oldest first; --follow keeps printing new ones",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, closeFn, err := g.producer(session)
			if err != nil {
				return err
			}
			defer closeFn()
			ctx := cmd.Context()
			if !follow {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, g.timeout)
				defer cancel()
			}
			err = p.ReadEvents(ctx, session, &producer.ReadOpts{Follow: follow, JobID: job}, func(ev *contracts.Event) error {
				if g.jsonOut {
					return g.printLine(ev) // one event per line
				}
				line := fmt.Sprintf("%s  %-16s %s  %s", ev.Time.Format("15:04:05.000"), ev.Data.Status, ev.Data.JobID, ev.Data.Tool)
				if ev.Data.Error != nil {
					line += "  " + ev.Data.Error.Error()
				} else if len(ev.Data.Result) > 0 {
					r := string(ev.Data.Result)
					if len(r) > 120 {
						r = r[:120] + "…"
					}
					line += "  " + r
				}
				_, err := fmt.Fprintln(g.stdout, line)
				return err
			})
			if follow && ctx.Err() != nil {
				return nil
			}
			return err
		},
	}
	cmd.Flags().StringVar(&session, "session", producer.DefaultSession, "session to read")
	cmd.Flags().StringVar(&job, "job", "", "only this job's events")
	cmd.Flags().BoolVar(&follow, "follow", false, "keep printing new events until interrupted")
	return cmd
}

func newCancelCmd(g *globals) *cobra.Command {
	var session string
	cmd := &cobra.Command{
		Use:   "cancel JOB_ID",
		Short: "Cancel a queued or running job of a session",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, closeFn, err := g.producer(session)
			if err != nil {
				return err
			}
			defer closeFn()
			if err := p.Cancel(cmd.Context(), session, args[0]); err != nil {
				if errors.Is(err, producer.ErrUnknownJob) {
					return fmt.Errorf("no job %s in session %s: nothing was cancelled (a job submitted later with this id in this session will not start)", args[0], session)
				}
				return err
			}
			if g.jsonOut {
				return g.printJSON(map[string]any{"cancelled": args[0], "session": session})
			}
			fmt.Fprintf(g.stdout, "cancelled %s\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&session, "session", producer.DefaultSession, "session of the job")
	return cmd
}

// awaitTelling waits for job's terminal event and says on stderr when the
// job parks on the way (an approval, a suspended code-mode run), so a
// person waiting on a terminal knows what it waits for. A wait that runs
// out says the job is still there and how to follow it.
func awaitTelling(ctx context.Context, g *globals, p *producer.Producer, job *contracts.Job) (*contracts.Event, error) {
	ev, err := p.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
	if err != nil {
		return nil, stillWaiting(g, job, contracts.StatusQueued, err)
	}
	if ev.Data.Status.Terminal() {
		return ev, nil
	}
	tellParked(g, ev)
	parked := ev.Data.Status
	if ev, err = p.Await(ctx, job.Session, job.ID, nil); err != nil {
		return nil, stillWaiting(g, job, parked, err)
	}
	return ev, nil
}

// tellParked says on stderr what a parked job waits for.
func tellParked(g *globals, ev *contracts.Event) {
	switch ev.Data.Status {
	case contracts.StatusApprovalPending:
		var pending struct {
			ApprovalID string `json:"approvalId"`
		}
		_ = json.Unmarshal(ev.Data.Result, &pending)
		g.tell("waiting for approval: %s (approve with `toolq approve %s`, or deny with `toolq deny %s`)",
			pending.ApprovalID, pending.ApprovalID, pending.ApprovalID)
	default:
		g.tell("job %s is %s", ev.Data.JobID, ev.Data.Status)
	}
}

// stillWaiting explains a wait that ended before the job did.
func stillWaiting(g *globals, job *contracts.Job, status contracts.Status, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("job %s is still %s after --timeout %s; it goes on without you: follow it with `toolq events --session %s --job %s --follow`",
			job.ID, status, g.timeout, job.Session, job.ID)
	}
	return fmt.Errorf("waiting for job %s: %w", job.ID, err)
}
