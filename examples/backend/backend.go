// Command backend is a service already on asynq (Redis) that hands work to
// toolq without speaking NATS: it enqueues toolq:submit tasks, which the
// asynq engine of toolq's scheduler turns into toolq jobs, and reads each
// job's terminal event back as its task's result.
//
//	toolq dev --demo-provider &
//	toolq scheduler --engine asynq --redis redis://127.0.0.1:6379/0 &
//	go run ./examples/backend --redis redis://127.0.0.1:6379/0
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hibiken/asynq"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/scheduler"
)

// Config of the service's run.
type Config struct {
	// Redis is the redis:// URL of the service's asynq Redis.
	Redis string
	// Queue is the asynq queue toolq's scheduler serves
	// (scheduler.DefaultQueue unless it was started with another).
	Queue string
	// Reports is how many shops' nightly reports to ask for.
	Reports int
	// Day names the night: task ids (and job ids) are
	// report-<day>-<shop>, so asking again for the same night enqueues
	// nothing new and reads the results already there.
	Day string
	// Session is the toolq session of the service's jobs.
	Session string
	// Poll is how often a pending task's state is read; 200 ms by default.
	Poll time.Duration
	// Log receives what the service does; io.Discard when nil.
	Log io.Writer
}

// Report is one shop's result, read from its task.
type Report struct {
	Shop    int
	TaskID  string
	Status  contracts.Status
	Content string
	Error   string
	// Enqueued is false when the task was already in Redis (an earlier run).
	Enqueued bool
}

// Run enqueues one toolq:submit task per shop and waits for all their
// results (or for ctx to end).
func Run(ctx context.Context, cfg Config) ([]Report, error) {
	if cfg.Queue == "" {
		cfg.Queue = scheduler.DefaultQueue
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 200 * time.Millisecond
	}
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	opt, err := asynq.ParseRedisURI(cfg.Redis)
	if err != nil {
		return nil, fmt.Errorf("backend: --redis: %w", err)
	}
	client := asynq.NewClient(opt)
	defer client.Close()
	insp := asynq.NewInspector(opt)
	defer insp.Close()

	reports := make([]Report, cfg.Reports)
	for shop := range cfg.Reports {
		r := &reports[shop]
		r.Shop, r.TaskID = shop, fmt.Sprintf("report-%s-%d", cfg.Day, shop)
		payload, err := json.Marshal(scheduler.SubmitPayload{
			ID: r.TaskID, Tool: contracts.ToolCodeExecution, Session: cfg.Session,
			Input:     mustJSON(contracts.CodeExecutionInput{Task: task(cfg.Day, shop)}),
			TimeoutMs: 120_000, Meta: map[string]string{"shop": fmt.Sprint(shop), "day": cfg.Day},
		})
		if err != nil {
			return nil, err
		}
		// The task id is the job id: asynq refuses a second task of the
		// id while the first is kept (Retention), and toolq's duplicate
		// window would keep one job anyway.
		_, err = client.EnqueueContext(ctx, asynq.NewTask(scheduler.TaskSubmit, payload),
			asynq.Queue(cfg.Queue), asynq.TaskID(r.TaskID), asynq.Retention(24*time.Hour), asynq.MaxRetry(3))
		switch {
		case err == nil:
			r.Enqueued = true
		case errors.Is(err, asynq.ErrTaskIDConflict):
			// Asked for before: read its result.
		default:
			return nil, fmt.Errorf("backend: enqueue %s: %w", r.TaskID, err)
		}
	}
	fmt.Fprintf(logw, "backend: %d report tasks on asynq queue %q\n", cfg.Reports, cfg.Queue)

	// asynq tells nobody when a task is done: read each task's state
	// until it is completed (its result is the toolq job's terminal
	// event) or archived (the job failed, or asynq gave up on it).
	t := time.NewTicker(cfg.Poll)
	defer t.Stop()
	for left := cfg.Reports; left > 0; {
		for i := range reports {
			r := &reports[i]
			if r.Status != "" {
				continue
			}
			info, err := insp.GetTaskInfo(cfg.Queue, r.TaskID)
			if err != nil {
				return reports, fmt.Errorf("backend: task %s: %w", r.TaskID, err)
			}
			switch info.State {
			case asynq.TaskStateCompleted, asynq.TaskStateArchived:
				read(r, info)
				left--
				fmt.Fprintf(logw, "backend: shop %d: %s\n", r.Shop, r.Status)
			}
		}
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return reports, ctx.Err()
		case <-t.C:
		}
	}
	return reports, nil
}

// read fills r from a finished task: its result is the job's terminal
// event when toolq got as far as running the job.
func read(r *Report, info *asynq.TaskInfo) {
	r.Status, r.Error = contracts.StatusFailed, info.LastErr
	ev, err := contracts.DecodeEvent(info.Result)
	if err != nil {
		return
	}
	r.Status = ev.Data.Status
	if ev.Data.Error != nil {
		r.Error = ev.Data.Error.Error()
	}
	var d contracts.CodeExecutionDetails
	if ev.Data.Status == contracts.StatusCompleted && json.Unmarshal(ev.Data.Result, &d) == nil {
		r.Content = d.Content
	}
}

// task is the analysis asked for shop on day, its data inline.
func task(day string, shop int) string {
	totals := make([]string, 0, 6)
	for k := range 6 {
		totals = append(totals, fmt.Sprintf("%.2f", float64((shop+1)*(k*37%101+13))/3))
	}
	return fmt.Sprintf("Shop %d's order totals in EUR for %s: %v. Compute the count, mean and median, and list the totals above the mean.", shop, day, totals)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func main() {
	var cfg Config
	flag.StringVar(&cfg.Redis, "redis", envOr("REDIS_URL", "redis://127.0.0.1:6379/0"), "the service's asynq Redis (env REDIS_URL)")
	flag.StringVar(&cfg.Queue, "queue", scheduler.DefaultQueue, "asynq queue toolq's scheduler serves")
	flag.IntVar(&cfg.Reports, "reports", 3, "how many shops' reports to ask for")
	flag.StringVar(&cfg.Day, "day", time.Now().UTC().Format("20060102"), "the night the reports are for (task ids report-<day>-<shop>)")
	flag.StringVar(&cfg.Session, "session", "orders-backend", "toolq session of the service's jobs")
	flag.Parse()
	cfg.Log = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	reports, err := Run(ctx, cfg)
	for _, r := range reports {
		if r.Status == "" {
			continue
		}
		fmt.Printf("shop %d (%s): %s\n", r.Shop, r.TaskID, r.Status)
		if r.Content != "" {
			fmt.Printf("  %s\n", r.Content)
		}
		if r.Error != "" {
			fmt.Printf("  error: %s\n", r.Error)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "backend:", err)
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
