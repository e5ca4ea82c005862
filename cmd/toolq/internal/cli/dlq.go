package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolq/toolq/cmd/toolq/internal/operator"
	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

func newDLQCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, show, requeue and purge dead letters (operator)",
		Long: `dlq works on the TOOLQ_DLQ stream: jobs that exhausted their attempts, and
jobs that waited longer than the queue-time limit for a tool no worker
served. Each dead letter is named by its stream sequence (SEQ, first column
of ls) or by its job id.

It is an operator command: the DLQ holds every tenant's dead letters and
lives in the toolq account, which tenant accounts do not reach. With
--tenant-account (or a tenant's credentials) it refuses to run.`,
	}
	cmd.AddCommand(newDLQLsCmd(g), newDLQShowCmd(g), newDLQRequeueCmd(g), newDLQPurgeCmd(g))
	return cmd
}

// dlqFilter selects dead letters: operator.Filter with its flags.
type dlqFilter struct{ operator.Filter }

func (f *dlqFilter) register(cmd *cobra.Command, limitDefault int) {
	fs := cmd.Flags()
	fs.StringVar(&f.Tool, "tool", "", "only dead letters of this tool")
	fs.StringVar(&f.Session, "session", "", "only dead letters of this session")
	fs.StringVar(&f.Tenant, "tenant", "", "only dead letters of this tenant (default: every tenant's)")
	fs.IntVar(&f.Limit, "limit", limitDefault, "at most this many, oldest first (0: no limit)")
}

// openDLQFor opens the DLQ for cmd under the command line's timeout; done
// closes it and ends the timeout.
func (g *globals) openDLQFor(cmd *cobra.Command) (context.Context, *operator.DLQ, *bus.Events, func(), error) {
	ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
	nc, js, err := g.operatorBus(ctx, "dlq")
	if err != nil {
		cancel()
		return nil, nil, nil, nil, err
	}
	q, err := operator.OpenDLQ(ctx, js, g.subjects())
	if err == nil {
		var events *bus.Events
		if events, err = bus.NewEvents(ctx, js, g.subjects()); err == nil {
			return ctx, q, events, func() { nc.Close(); cancel() }, nil
		}
	}
	if !errors.Is(err, operator.ErrNoDLQ) {
		err = operatorErr(nc, "dlq", err)
	} else {
		err = fmt.Errorf("dlq: %w", err)
	}
	nc.Close()
	cancel()
	return nil, nil, nil, nil, err
}

func newDLQLsCmd(g *globals) *cobra.Command {
	var f dlqFilter
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List dead letters, oldest first (--json: one JSON object a line)",
		Example: `  toolq dlq ls
  toolq dlq ls --tool code_execution --session agent-7 --limit 20
  toolq --json dlq ls --tenant ACME`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.Check(); err != nil {
				return err
			}
			ctx, q, _, done, err := g.openDLQFor(cmd)
			if err != nil {
				return err
			}
			defer done()
			var tw *tabwriter.Writer
			if !g.jsonOut {
				tw = tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SEQ\tTIME\tTOOL\tTENANT\tSESSION\tJOB\tATTEMPTS\tERROR")
			}
			n := 0
			err = q.Walk(ctx, &f.Filter, func(d *operator.DeadLetter) error {
				n++
				r := d.Row()
				if g.jsonOut {
					return g.printLine(r)
				}
				msg := d.Bad
				if r.Error != nil {
					msg = string(r.Error.Code) + ": " + r.Error.Message
				}
				_, err := fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Seq, r.Time.Local().Format("2006-01-02 15:04:05"),
					r.Tool, operator.OrDash(r.Tenant), operator.OrDash(r.Session), operator.OrDash(r.JobID), r.Attempts, clip(msg, 80))
				return err
			})
			if err != nil {
				return err
			}
			if tw == nil {
				return nil
			}
			if n == 0 {
				_, err = fmt.Fprintln(g.stdout, "no dead letters")
				return err
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if f.Limit > 0 && n == f.Limit {
				g.tell("the first %d shown; --limit 0 shows every one", n)
			}
			return nil
		},
	}
	f.register(cmd, 100)
	return cmd
}

func newDLQShowCmd(g *globals) *cobra.Command {
	var f dlqFilter
	cmd := &cobra.Command{
		Use:   "show SEQ|JOB_ID",
		Short: "Print one dead letter whole: the job as it was received and its last error",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.Check(); err != nil {
				return err
			}
			ctx, q, _, done, err := g.openDLQFor(cmd)
			if err != nil {
				return err
			}
			defer done()
			d, err := q.Find(ctx, args[0], &f.Filter)
			if err != nil {
				return err
			}
			if d == nil {
				return contracts.Errorf(contracts.CodeInvalidInput, "no dead letter %s", args[0])
			}
			if g.jsonOut {
				return g.printJSON(map[string]any{"seq": d.Seq, "subject": d.Subject, "stored": d.Stored, "deadLetter": d.DL})
			}
			return printDeadLetter(g, d)
		},
	}
	f.register(cmd, 0)
	_ = cmd.Flags().MarkHidden("limit")
	return cmd
}

func printDeadLetter(g *globals, d *operator.DeadLetter) error {
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 1, ' ', 0)
	dl := &d.DL
	fmt.Fprintf(tw, "seq:\t%d\n", d.Seq)
	fmt.Fprintf(tw, "subject:\t%s\n", d.Subject)
	fmt.Fprintf(tw, "stored:\t%s\n", d.Stored.Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "tool:\t%s\n", dl.Tool)
	fmt.Fprintf(tw, "tenant:\t%s\n", operator.OrDash(dl.Tenant))
	fmt.Fprintf(tw, "session:\t%s\n", operator.OrDash(dl.Session))
	fmt.Fprintf(tw, "job:\t%s\n", operator.OrDash(dl.JobID))
	fmt.Fprintf(tw, "attempts:\t%d\n", dl.Attempts)
	fmt.Fprintf(tw, "worker:\t%s\n", operator.OrDash(dl.Worker))
	if d.Bad != "" {
		fmt.Fprintf(tw, "problem:\t%s\n", d.Bad)
	}
	if dl.Error != nil {
		fmt.Fprintf(tw, "error:\t%s\n", dl.Error.Code)
		fmt.Fprintf(tw, "message:\t%s\n", dl.Error.Message)
		if len(dl.Error.Details) > 0 {
			fmt.Fprintf(tw, "details:\t%s\n", dl.Error.Details)
		}
	}
	if dl.JobTruncated {
		fmt.Fprintf(tw, "truncated:\tthe job was %d bytes (sha256 %s); its first bytes follow\n", dl.JobSize, dl.JobSHA256)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(g.stdout, "job message:")
	var pretty any
	if err := json.Unmarshal(dl.Job, &pretty); err == nil {
		return g.printJSON(pretty)
	}
	_, err := fmt.Fprintf(g.stdout, "%s\n", dl.Job)
	return err
}

func newDLQRequeueCmd(g *globals) *cobra.Command {
	var (
		f   dlqFilter
		all bool
	)
	cmd := &cobra.Command{
		Use:   "requeue SEQ|JOB_ID | --all",
		Short: "Put dead letters' jobs back on their tool's queue, then delete the dead letters",
		Long: `requeue republishes a dead letter's job to its tool's subject, in its
tenant's jobs stream when it has a tenant, and deletes the dead letter only
once the bus acknowledged the job. The job runs again from its first
attempt, under the id <job>_rq<SEQ> (meta toolq.requeued_from names the
original id): the original id already has its failed event and is still
deduplicated by the bus. Running requeue again after a crash enqueues
nothing twice: the same dead letter always gives the same id.

--all requeues every dead letter the filters select (--tool, --session,
--tenant, --limit); one that cannot be requeued (a message that was no
job, a truncated one) is reported and kept.`,
		Example: `  toolq dlq requeue 42
  toolq dlq requeue order-45 --tenant ACME
  toolq dlq requeue --all --tool code_execution`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.Check(); err != nil {
				return err
			}
			if all == (len(args) == 1) {
				return contracts.Errorf(contracts.CodeInvalidInput, "dlq requeue: name one dead letter (SEQ or JOB_ID) or say --all")
			}
			ctx, q, events, closeDLQ, err := g.openDLQFor(cmd)
			if err != nil {
				return err
			}
			defer closeDLQ()
			var targets []*operator.DeadLetter
			if all {
				err = q.Walk(ctx, &f.Filter, func(d *operator.DeadLetter) error {
					targets = append(targets, d)
					return nil
				})
			} else {
				var d *operator.DeadLetter
				d, err = q.Find(ctx, args[0], &f.Filter)
				targets = append(targets, d)
			}
			if err != nil {
				return err
			}
			var failed []string
			unserved := map[string]bool{}
			done := 0
			for _, d := range targets {
				r, err := q.Requeue(ctx, d, events)
				if err != nil {
					if !all {
						return err
					}
					failed = append(failed, strconv.FormatUint(d.Seq, 10))
					g.logger().Warn("dead letter not requeued", "seq", d.Seq, "err", err)
					continue
				}
				done++
				key := r.Tenant + "\x00" + d.DL.Tool
				if _, seen := unserved[key]; !seen {
					unserved[key] = !q.Served(ctx, r.Tenant, d.DL.Tool)
					if unserved[key] {
						g.tell("warning: no worker has served %s (tenant %s) yet: the job waits for one (or for the queue-time limit)", d.DL.Tool, operator.OrDash(r.Tenant))
					}
				}
				if g.jsonOut {
					if err := g.printLine(r); err != nil {
						return err
					}
					continue
				}
				note := ""
				if r.Already {
					note = " (already on the bus from an earlier requeue)"
				}
				fmt.Fprintf(g.stdout, "requeued %d: job %s as %s on %s%s\n", r.Seq, r.JobID, r.RequeuedAs, r.Subject, note)
			}
			if all && !g.jsonOut && done == 0 && len(failed) == 0 {
				fmt.Fprintln(g.stdout, "no dead letters to requeue")
			}
			if len(failed) > 0 {
				return fmt.Errorf("dlq requeue: %d dead letters not requeued and kept (seq %s); %d requeued", len(failed), strings.Join(failed, ", "), done)
			}
			return nil
		},
	}
	f.register(cmd, 0)
	cmd.Flags().BoolVar(&all, "all", false, "requeue every dead letter the filters select")
	return cmd
}

func newDLQPurgeCmd(g *globals) *cobra.Command {
	var (
		f        dlqFilter
		all, yes bool
	)
	cmd := &cobra.Command{
		Use:   "purge [SEQ|JOB_ID] [--tool T] [--session S] [--tenant T] | --all",
		Short: "Delete dead letters: one, those the filters select, or --all; asks first unless --yes",
		Example: `  toolq dlq purge 42 --yes
  toolq dlq purge --tool sleep --session agent-7
  toolq dlq purge --all --yes`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.Check(); err != nil {
				return err
			}
			if !all && len(args) == 0 && !f.Narrowed() {
				return contracts.Errorf(contracts.CodeInvalidInput, "dlq purge: name a dead letter, narrow with --tool, --session or --tenant, or say --all")
			}
			if all && (len(args) > 0 || f.Narrowed()) {
				return contracts.Errorf(contracts.CodeInvalidInput, "dlq purge: --all deletes every dead letter: not with a dead letter or filters")
			}
			ctx, q, _, done, err := g.openDLQFor(cmd)
			if err != nil {
				return err
			}
			defer done()
			// Exactly the dead letters counted and confirmed are deleted;
			// one that arrives meanwhile stays.
			var seqs []uint64
			if len(args) == 1 {
				d, err := q.Find(ctx, args[0], &f.Filter)
				if err != nil {
					return err
				}
				seqs = append(seqs, d.Seq)
			} else if err := q.Walk(ctx, &f.Filter, func(d *operator.DeadLetter) error {
				seqs = append(seqs, d.Seq)
				return nil
			}); err != nil {
				return err
			}
			if len(seqs) == 0 {
				if g.jsonOut {
					return g.printJSON(map[string]any{"purged": 0})
				}
				_, err := fmt.Fprintln(g.stdout, "no dead letters to purge")
				return err
			}
			if err := askYes(cmd, g, yes, fmt.Sprintf("Delete %d dead letters (seq %d … %d)?", len(seqs), seqs[0], seqs[len(seqs)-1])); err != nil {
				return err
			}
			// Up to the last one counted, in one request, when every dead
			// letter below it was counted.
			purged, err := q.Purge(ctx, seqs, all && f.Limit == 0)
			if err != nil {
				return err
			}
			if g.jsonOut {
				return g.printJSON(map[string]any{"purged": purged})
			}
			_, err = fmt.Fprintf(g.stdout, "purged %d dead letters\n", purged)
			return err
		},
	}
	f.register(cmd, 0)
	cmd.Flags().BoolVar(&all, "all", false, "delete every dead letter")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}
