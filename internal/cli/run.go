package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/embedded"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

type workerFlags struct {
	name        string
	concurrency int
	replicas    int
	stopTimeout time.Duration
}

func (f *workerFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.name, "name", "", "worker name (default: hostname and a random suffix)")
	cmd.Flags().IntVar(&f.concurrency, "concurrency", 16, "jobs of each tool run at once")
	cmd.Flags().IntVar(&f.replicas, "replicas", 1, "stream replicas (3 in a cluster)")
	cmd.Flags().DurationVar(&f.stopTimeout, "stop-timeout", 30*time.Second, "how long a stop lets running jobs finish")
}

// newWorker builds a worker with every tool this binary has.
func newWorker(g *globals, nc *nats.Conn, f *workerFlags) (*worker.Worker, error) {
	w, err := worker.New(nc, &worker.Config{
		Name: f.name, Subjects: g.subjects(), Replicas: f.replicas, StopTimeout: f.stopTimeout,
		Logger: g.log, Tool: worker.ToolConfig{Concurrency: f.concurrency},
	})
	if err != nil {
		return nil, err
	}
	if err := registerTools(g, w, nc.Publish); err != nil {
		return nil, err
	}
	return w, nil
}

// serve starts w and runs it until ctx ends, then stops it gracefully.
func serve(ctx context.Context, g *globals, w *worker.Worker, f *workerFlags) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	g.log.Info("stopping worker")
	sctx, cancel := context.WithTimeout(context.Background(), f.stopTimeout+5*time.Second)
	defer cancel()
	return w.Stop(sctx)
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
			w, err := newWorker(g, nc, f)
			if err != nil {
				return err
			}
			g.log.Info("worker connected", slog.String("nats", g.natsURL), slog.String("name", w.Name()), slog.Any("tools", w.Tools()))
			return serve(cmd.Context(), g, w, f)
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
			srv, err := embedded.Start(&embedded.Config{Listen: listen, StoreDir: dataDir, Logs: logs})
			if err != nil {
				return err
			}
			defer srv.Stop()
			nc, err := srv.Connect(nats.Name("toolq dev worker"))
			if err != nil {
				return err
			}
			defer nc.Close()
			w, err := newWorker(g, nc, f)
			if err != nil {
				return err
			}
			if err := w.Start(ctx); err != nil {
				return err
			}
			abs, _ := filepath.Abs(dataDir)
			fmt.Fprintf(g.stderr, "toolq dev: NATS with JetStream at %s (data in %s)\n", srv.URL(), abs)
			fmt.Fprintf(g.stderr, "toolq dev: worker %s runs %v\n", w.Name(), w.Tools())
			fmt.Fprintf(g.stderr, "toolq dev: connect with  export TOOLQ_NATS=%s\n", srv.URL())
			fmt.Fprintf(g.stderr, "toolq dev: then try      toolq submit --tool noop --input '{\"hello\":\"toolq\"}' --wait\n")

			if err := selfCheck(ctx, g, srv); err != nil {
				_ = w.Stop(context.Background())
				return fmt.Errorf("self-check: %w", err)
			}
			if !once {
				<-ctx.Done()
			}
			sctx, cancel := context.WithTimeout(context.Background(), f.stopTimeout+5*time.Second)
			defer cancel()
			return w.Stop(sctx)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:4222", "address the embedded server listens on")
	cmd.Flags().StringVar(&dataDir, "data", ".toolq/dev", "JetStream data directory, kept across restarts")
	cmd.Flags().BoolVar(&once, "once", false, "exit after the self-check job instead of serving")
	cmd.Flags().BoolVar(&logs, "server-logs", false, "print the embedded server's logs")
	return cmd
}

// selfCheck runs one noop job through the bus and prints its completion event.
func selfCheck(ctx context.Context, g *globals, srv *embedded.Server) error {
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
	fmt.Fprintf(g.stderr, "toolq dev: self-check job %s completed:\n", job.ID)
	return g.printJSON(ev)
}
