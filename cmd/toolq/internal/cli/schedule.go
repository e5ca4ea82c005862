package cli

import (
	"context"
	"fmt"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/hibiken/asynq"
	"github.com/spf13/cobra"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/scheduler"
)

// Engines of `toolq scheduler`.
const (
	engineNATS  = "nats"
	engineAsynq = "asynq"
)

func newSchedulerCmd(g *globals) *cobra.Command {
	var (
		engine, redisURL string
		replicas         int
		stopTimeout      time.Duration
		mf               metricsFlags
		tf               tracingFlags
	)
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Run a scheduler engine: turn due schedules into jobs until interrupted",
		Long: `Run a scheduler engine. Schedules live in the NATS KV bucket <prefix>_schedules
(see "toolq schedule"); the engine fires them. Any number of schedulers may run at
once: each firing is enqueued once.

  nats   JetStream message schedules (nats-server >= 2.14); no Redis needed.
  asynq  asynq's Scheduler and delayed tasks on Redis; also takes toolq:submit
         tasks enqueued by services on asynq.`,
		Example: `  toolq scheduler
  toolq scheduler --engine asynq --redis redis://127.0.0.1:6379/0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if stopTimeout <= 0 {
				return contracts.Errorf(contracts.CodeInvalidInput, "--stop-timeout must be positive")
			}
			nc, err := g.connect("toolq scheduler")
			if err != nil {
				return err
			}
			defer nc.Close()
			ms, err := mf.start(g)
			if err != nil {
				return err
			}
			defer ms.stop()
			var obs scheduler.Observer
			if ms != nil {
				obs = ms.m.Scheduler()
			}
			tr, err := tf.start(cmd.Context(), g)
			if err != nil {
				return err
			}
			defer stopTracer(g, tr)
			var tracer scheduler.Tracer
			if tr != nil {
				tracer = tr
			}
			var e scheduler.Scheduler
			switch engine {
			case engineNATS:
				e, err = scheduler.NewNATS(nc, &scheduler.NATSConfig{Subjects: g.subjects(), Replicas: replicas, Timeout: g.timeout, Logger: g.log, Observer: obs, Tracer: tracer})
			case engineAsynq:
				opt, perr := asynq.ParseRedisURI(redisURL)
				if perr != nil {
					return contracts.Errorf(contracts.CodeInvalidInput, "--redis %q: %v", redisURL, perr)
				}
				e, err = scheduler.NewAsynq(nc, &scheduler.AsynqConfig{
					Redis: opt, Subjects: g.subjects(), Replicas: replicas, Timeout: g.timeout,
					StopTimeout: stopTimeout, Logger: g.log, Observer: obs, Tracer: tracer,
				})
			default:
				return contracts.Errorf(contracts.CodeInvalidInput, "--engine %q: want nats or asynq", engine)
			}
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := e.Start(ctx); err != nil {
				return err
			}
			g.log.Info("scheduler running", slog.String("engine", engine), slog.String("nats", redactURL(g.natsURL)))
			ms.ready(nc)
			<-ctx.Done()
			ms.notReady("stopping")
			g.log.Info("stopping scheduler")
			sctx, cancel := context.WithTimeout(context.Background(), stopTimeout+5*time.Second)
			defer cancel()
			return e.Stop(sctx)
		},
	}
	mf.register(cmd)
	tf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&engine, "engine", envOr("TOOLQ_SCHEDULER_ENGINE", engineNATS), "engine: nats or asynq (env TOOLQ_SCHEDULER_ENGINE)")
	f.StringVar(&redisURL, "redis", envOr("TOOLQ_REDIS", "redis://127.0.0.1:6379/0"), "Redis URL of the asynq engine (env TOOLQ_REDIS)")
	f.IntVar(&replicas, "replicas", 1, "replicas of the streams and bucket when created (3 in a cluster)")
	f.DurationVar(&stopTimeout, "stop-timeout", 10*time.Second, "how long a stop lets in-flight firings finish")
	return cmd
}

func newScheduleCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Add, list, pause, resume and remove delayed and periodic jobs",
		Long: `Schedules submit a job later (--at, --in) or periodically (--every, --cron with
--tz). They are stored in NATS and fired by "toolq scheduler" (either engine).
Fire times are whole seconds; cron expressions have five fields.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newScheduleAddCmd(g), newScheduleLsCmd(g), newScheduleRmCmd(g),
		newSchedulePauseCmd(g, true), newSchedulePauseCmd(g, false))
	return cmd
}

func (g *globals) scheduleClient() (*scheduler.Client, func(), error) {
	nc, err := g.connect("toolq schedule")
	if err != nil {
		return nil, nil, err
	}
	c, err := scheduler.NewClient(nc, &scheduler.ClientConfig{Subjects: g.subjects(), Timeout: g.timeout, Logger: g.log})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return c, nc.Close, nil
}

func newScheduleAddCmd(g *globals) *cobra.Command {
	var (
		s                               scheduler.Schedule
		at, input                       string
		timeoutMs                       int64
		attempts                        int
		progress                        bool
		every, in                       time.Duration
		cronSpec, tz, id, tool, session string
	)
	cmd := &cobra.Command{
		Use:   "add",
		Short: "Add a schedule; prints its id",
		Example: `  toolq schedule add --cron '0 2 * * *' --tz Europe/Berlin --tool T --input @job.json
  toolq schedule add --in 1h --tool T --input '{"retry":true}'
  toolq schedule add --at 2030-01-01T00:00:00Z --tool T
  toolq schedule add --every 10s --tool noop --id heartbeat`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in2, err := readInput(input, cmd.InOrStdin())
			if err != nil {
				return err
			}
			s = scheduler.Schedule{
				ID: id, In: in, Every: every, Cron: cronSpec, TimeZone: tz,
				Job: scheduler.Job{Tool: tool, Session: session, Input: in2, TimeoutMs: timeoutMs, MaxAttempts: attempts, Progress: progress},
			}
			if at != "" {
				t, err := time.Parse(time.RFC3339, at)
				if err != nil {
					return contracts.Errorf(contracts.CodeInvalidInput, "--at %q: want RFC 3339, like 2030-01-01T02:00:00+01:00", at)
				}
				s.At = t
			}
			c, closeFn, err := g.scheduleClient()
			if err != nil {
				return err
			}
			defer closeFn()
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			created, err := c.Create(ctx, &s)
			if err != nil {
				return err
			}
			if g.jsonOut {
				return g.printJSON(created)
			}
			fmt.Fprintln(g.stdout, created.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cronSpec, "cron", "", "five-field cron expression or @hourly/@daily/@weekly/@monthly/@yearly")
	f.StringVar(&tz, "tz", "", "IANA time zone of --cron (default UTC)")
	f.DurationVar(&every, "every", 0, "fire every interval (whole seconds, at least 1s)")
	f.DurationVar(&in, "in", 0, "fire once after this delay")
	f.StringVar(&at, "at", "", "fire once at this RFC 3339 time")
	f.StringVar(&tool, "tool", "", "tool of the job (required)")
	f.StringVar(&input, "input", "", "input JSON of the job, @file or @- for stdin")
	f.StringVar(&session, "session", producer.DefaultSession, "session of the job")
	f.StringVar(&id, "id", "", "schedule id (default random)")
	f.Int64Var(&timeoutMs, "job-timeout-ms", 0, "timeout of one attempt (default: the tool's)")
	f.IntVar(&attempts, "max-attempts", 0, "most attempts (default: the tool's)")
	f.BoolVar(&progress, "progress", false, "ask for intermediate events")
	_ = cmd.MarkFlagRequired("tool")
	cmd.MarkFlagsMutuallyExclusive("cron", "every", "in", "at")
	cmd.MarkFlagsOneRequired("cron", "every", "in", "at")
	return cmd
}

func newScheduleLsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List schedules with their next and last fire times",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, closeFn, err := g.scheduleClient()
			if err != nil {
				return err
			}
			defer closeFn()
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			list, err := c.List(ctx)
			if err != nil {
				return err
			}
			if g.jsonOut {
				return g.printJSON(list)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSCHEDULE\tTOOL\tSESSION\tNEXT\tLAST")
			for _, in := range list {
				next := fmtTime(in.Next)
				if in.Paused {
					next = "paused"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", in.Schedule.ID, in.Schedule.Spec(), in.Schedule.Job.Tool,
					in.Schedule.Job.Session, next, fmtTime(in.LastFire))
			}
			return tw.Flush()
		},
	}
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func newScheduleRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID…",
		Aliases: []string{"delete"},
		Short:   "Remove schedules; they never fire again",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeFn, err := g.scheduleClient()
			if err != nil {
				return err
			}
			defer closeFn()
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			deleted := make([]string, 0, len(args))
			for _, id := range args {
				if err := c.Delete(ctx, id); err != nil {
					return err
				}
				deleted = append(deleted, id)
				if !g.jsonOut {
					fmt.Fprintf(g.stdout, "deleted %s\n", id)
				}
			}
			if g.jsonOut {
				return g.printJSON(map[string]any{"deleted": deleted})
			}
			return nil
		},
	}
}

func newSchedulePauseCmd(g *globals, pause bool) *cobra.Command {
	use, short, done := "pause ID…", "Pause periodic schedules: their firings are skipped until resume", "paused"
	if !pause {
		use, short, done = "resume ID…", "Resume paused schedules from their next fire time", "resumed"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, closeFn, err := g.scheduleClient()
			if err != nil {
				return err
			}
			defer closeFn()
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			for _, id := range args {
				if pause {
					err = c.Pause(ctx, id)
				} else {
					err = c.Resume(ctx, id)
				}
				if err != nil {
					return err
				}
				if !g.jsonOut {
					fmt.Fprintf(g.stdout, "%s %s\n", done, id)
				}
			}
			if g.jsonOut {
				return g.printJSON(map[string]any{done: args})
			}
			return nil
		},
	}
}
