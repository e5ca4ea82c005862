package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolq/toolq/cmd/toolq/internal/operator"
	"github.com/toolq/toolq/contracts"
)

func newJobsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "Look at the queues of jobs (operator)",
	}
	cmd.AddCommand(newJobsLsCmd(g))
	return cmd
}

func newJobsLsCmd(g *globals) *cobra.Command {
	var (
		tool, tenant string
		limit        int
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List each tool's queue per tenant; with --tool, its jobs too (read-only)",
		Long: `ls reads the jobs stream and every tenant's jobs stream and prints, per tool,
the jobs in the stream, those no worker took yet (pending), those taken and
not finished (ack pending: running or waiting for a retry), those delivered
more than once, and the idle workers' pull requests. With --tool it also
lists that tool's jobs, oldest first, up to --limit: id, session, age and
whether a worker has taken it.

It only reads: stream and consumer infos, and the jobs by sequence. It is
an operator command (the toolq account); tenant accounts reach no stream.`,
		Example: `  toolq jobs ls
  toolq jobs ls --tool code_execution --limit 20
  toolq --json jobs ls --tenant ACME --tool noop`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tool != "" && !contracts.ValidTool(tool) {
				return contracts.Errorf(contracts.CodeInvalidInput, "--tool %q is not a tool name", tool)
			}
			if tenant != "" && !contracts.ValidID(tenant) {
				return contracts.Errorf(contracts.CodeInvalidInput, "--tenant %q is not a valid id", tenant)
			}
			if limit < 0 {
				return contracts.Errorf(contracts.CodeInvalidInput, "--limit %d is negative", limit)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			nc, js, err := g.operatorBus(ctx, "jobs")
			if err != nil {
				return err
			}
			defer nc.Close()
			s := g.subjects()
			all, read, err := operator.ListQueues(ctx, js, s, tenant, tool)
			if err != nil {
				return err
			}
			if g.jsonOut {
				for _, r := range all {
					if err := g.printLine(r); err != nil {
						return err
					}
				}
			} else {
				tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TENANT\tTOOL\tJOBS\tPENDING\tACK PENDING\tREDELIVERED\tWAITING WORKERS")
				for _, r := range all {
					waiting := fmt.Sprint(r.Waiting)
					if !r.Consumer {
						waiting = "no consumer"
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", operator.OrDash(r.Tenant), r.Tool, r.Messages, r.Pending, r.AckPending, r.Redelivered, waiting)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if tool == "" {
				return nil
			}
			var tw *tabwriter.Writer
			if !g.jsonOut {
				fmt.Fprintln(g.stdout)
				tw = tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SEQ\tTENANT\tJOB\tSESSION\tPRIORITY\tAGE\tSTATE")
			}
			left := limit
			for _, sq := range read {
				n, err := operator.WalkQueue(ctx, &sq, s, tool, left, func(j operator.QueuedJob) error {
					if g.jsonOut {
						return g.printLine(j)
					}
					_, err := fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", j.Seq, operator.OrDash(j.Tenant), operator.OrDash(j.JobID), operator.OrDash(j.Session),
						operator.OrDash(j.Priority), (time.Duration(j.AgeMs) * time.Millisecond).Round(time.Second), j.State)
					return err
				})
				if err != nil {
					return err
				}
				if limit > 0 {
					if left -= n; left == 0 {
						break
					}
				}
			}
			if tw != nil {
				return tw.Flush()
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&tool, "tool", "", "only this tool's queues, and list its jobs")
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's jobs stream (default: every stream)")
	cmd.Flags().IntVar(&limit, "limit", 100, "with --tool, at most this many jobs, oldest first (0: no limit)")
	return cmd
}
