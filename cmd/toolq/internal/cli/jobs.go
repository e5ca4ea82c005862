package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

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

// queueRow is one tool's queue in one jobs stream.
type queueRow struct {
	Kind   string `json:"kind"` // "queue"
	Tenant string `json:"tenant,omitempty"`
	Tool   string `json:"tool"`
	Stream string `json:"stream"`
	// Messages is the tool's jobs in the stream: waiting, running, or
	// waiting for a retry (a work queue drops a job when it is acked).
	Messages uint64 `json:"messages"`
	// Pending is the jobs no worker has taken yet; AckPending those taken
	// and not yet finished (running, or waiting for a retry); Redelivered
	// those delivered more than once; Waiting the pull requests of idle
	// workers. Without a consumer nobody ever served the tool here.
	Pending     uint64 `json:"pending"`
	AckPending  int    `json:"ackPending"`
	Redelivered int    `json:"redelivered"`
	Waiting     int    `json:"waiting"`
	Consumer    bool   `json:"consumer"`
}

// queuedJob is one job message of a queue.
type queuedJob struct {
	Kind    string    `json:"kind"` // "job"
	Tenant  string    `json:"tenant,omitempty"`
	Tool    string    `json:"tool"`
	Seq     uint64    `json:"seq"`
	JobID   string    `json:"jobId,omitempty"`
	Session string    `json:"session,omitempty"`
	Queued  time.Time `json:"queued"`
	AgeMs   int64     `json:"ageMs"`
	// State is "queued" (no worker took it yet) or "delivered" (a worker
	// took it: running, waiting for its next attempt, or for a slot).
	State string `json:"state"`
	// Priority is the job's level, "" for normal.
	Priority string `json:"priority,omitempty"`
}

// jobsStream is one jobs stream: the default tenant's or a named tenant's.
type jobsStream struct {
	tenant string
	name   string
}

// jobsStreams lists the jobs streams on the bus: TOOLQ_JOBS and each
// TOOLQ_TENANT_<tenant>_JOBS, the default tenant first.
func jobsStreams(ctx context.Context, js jetstream.JetStream, s contracts.Subjects) ([]jobsStream, error) {
	var out []jobsStream
	prefix := strings.TrimSuffix(s.TenantJobsStream("X"), "X_JOBS")
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		if name == s.JobsStream() {
			out = append(out, jobsStream{name: name})
			continue
		}
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		if tenant, ok := strings.CutSuffix(rest, "_JOBS"); ok && contracts.ValidID(tenant) {
			out = append(out, jobsStream{tenant: tenant, name: name})
		}
	}
	if err := names.Err(); err != nil {
		return nil, fmt.Errorf("jobs: list streams: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].tenant < out[j].tenant })
	return out, nil
}

// queues reads one stream's queues: jobs per tool subject and the tools'
// consumers. It reads infos only.
func queues(ctx context.Context, st jetstream.Stream, s contracts.Subjects, js jobsStream) ([]queueRow, map[string]*jetstream.ConsumerInfo, error) {
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(s.TenantJobs(js.tenant)))
	if err != nil {
		return nil, nil, fmt.Errorf("jobs: stream %s: %w", js.name, err)
	}
	rows := map[string]*queueRow{}
	row := func(tool string) *queueRow {
		r, ok := rows[tool]
		if !ok {
			r = &queueRow{Kind: "queue", Tenant: js.tenant, Tool: tool, Stream: js.name}
			rows[tool] = r
		}
		return r
	}
	for subject, n := range info.State.Subjects {
		if tool := s.TenantToolOf(js.tenant, subject); tool != "" {
			row(tool).Messages += n // every priority level's subject

		}
	}
	consumers := map[string]*jetstream.ConsumerInfo{}
	list := st.ListConsumers(ctx)
	for ci := range list.Info() {
		name, ok := strings.CutPrefix(ci.Name, "worker_")
		if !ok {
			continue
		}
		name, level, leveled := strings.Cut(name, "~") // worker_<tool>~high: a priority level's
		tool := strings.ReplaceAll(name, ":", ".")
		if !contracts.ValidTool(tool) || (leveled && level != string(contracts.PriorityHigh) && level != string(contracts.PriorityLow)) {
			continue
		}
		consumers[ci.Name] = ci
		r := row(tool)
		r.Consumer = true
		r.Pending += ci.NumPending
		r.AckPending += ci.NumAckPending
		r.Redelivered += ci.NumRedelivered
		r.Waiting += ci.NumWaiting
	}
	if err := list.Err(); err != nil {
		return nil, nil, fmt.Errorf("jobs: consumers of %s: %w", js.name, err)
	}
	out := make([]queueRow, 0, len(rows))
	for _, r := range rows {
		if !r.Consumer {
			r.Pending = r.Messages
		}
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tool < out[j].Tool })
	return out, consumers, nil
}

// walkQueue reads up to limit job messages of tool in one stream, oldest
// first, by direct reads of the stream by sequence: nothing is consumed or
// acknowledged, and no consumer is made (a work-queue stream refuses a
// second consumer whose filter overlaps the worker's).
func walkQueue(ctx context.Context, st jetstream.Stream, s contracts.Subjects, js jobsStream, tool string, prio contracts.Priority, ci *jetstream.ConsumerInfo, limit int, fn func(queuedJob) error) (int, error) {
	subject := s.TenantJobAt(js.tenant, tool, prio)
	level := ""
	if prio != contracts.PriorityNormal {
		level = string(prio)
	}
	var seq uint64
	n := 0
	now := time.Now()
	for limit == 0 || n < limit {
		raw, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("jobs: read %s: %w", subject, err)
		}
		seq = raw.Sequence + 1
		var head struct {
			ID      string `json:"id"`
			Session string `json:"session"`
		}
		_ = json.Unmarshal(raw.Data, &head)
		j := queuedJob{
			Kind: "job", Tenant: js.tenant, Tool: tool, Seq: raw.Sequence, Queued: raw.Time,
			AgeMs: now.Sub(raw.Time).Milliseconds(), State: "queued", Priority: level,
		}
		if contracts.ValidID(head.ID) {
			j.JobID = head.ID
		}
		if contracts.ValidID(head.Session) {
			j.Session = head.Session
		}
		if ci != nil && raw.Sequence <= ci.Delivered.Stream {
			j.State = "delivered"
		}
		if err := fn(j); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
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
			streams, err := jobsStreams(ctx, js, s)
			if err != nil {
				return err
			}
			type streamQueues struct {
				js        jobsStream
				st        jetstream.Stream
				consumers map[string]*jetstream.ConsumerInfo
			}
			var all []queueRow
			var read []streamQueues
			for _, jst := range streams {
				if tenant != "" && jst.tenant != tenant {
					continue
				}
				st, err := js.Stream(ctx, jst.name)
				if errors.Is(err, jetstream.ErrStreamNotFound) {
					continue // removed meanwhile
				}
				if err != nil {
					return fmt.Errorf("jobs: stream %s: %w", jst.name, err)
				}
				rows, consumers, err := queues(ctx, st, s, jst)
				if err != nil {
					return err
				}
				for _, r := range rows {
					if tool == "" || r.Tool == tool {
						all = append(all, r)
					}
				}
				read = append(read, streamQueues{js: jst, st: st, consumers: consumers})
			}
			if tenant != "" && len(read) == 0 {
				return contracts.Errorf(contracts.CodeInvalidInput, "no jobs stream for tenant %s (toolq tenant ls)", tenant)
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
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\n", orDash(r.Tenant), r.Tool, r.Messages, r.Pending, r.AckPending, r.Redelivered, waiting)
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
		walk:
			for _, sq := range read {
				for _, prio := range contracts.Priorities {
					ci := sq.consumers[s.ConsumerNameAt(tool, prio)]
					n, err := walkQueue(ctx, sq.st, s, sq.js, tool, prio, ci, left, func(j queuedJob) error {
						if g.jsonOut {
							return g.printLine(j)
						}
						_, err := fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", j.Seq, orDash(j.Tenant), orDash(j.JobID), orDash(j.Session),
							orDash(j.Priority), (time.Duration(j.AgeMs) * time.Millisecond).Round(time.Second), j.State)
						return err
					})
					if err != nil {
						return err
					}
					if limit > 0 {
						if left -= n; left == 0 {
							break walk
						}
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
