package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/toolq/toolq/internal/embedded"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/scheduler"
	"github.com/toolq/toolq/worker"
)

// A delayed job on the NATS-native engine, run by a worker.
func Example() {
	dir, err := os.MkdirTemp("", "toolq-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(&embedded.Config{StoreDir: dir})
	if err != nil {
		panic(err)
	}
	defer srv.Stop()
	nc, err := srv.Connect()
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)

	w, _ := worker.New(nc, &worker.Config{Logger: quiet, Builtins: true})
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = w.Stop(context.Background()) }()

	sched, _ := scheduler.NewNATS(nc, &scheduler.NATSConfig{Logger: quiet})
	if err := sched.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = sched.Stop(context.Background()) }()

	s, err := sched.Create(ctx, &scheduler.Schedule{
		ID: "report", In: time.Second,
		Job: scheduler.Job{Tool: worker.ToolNoop, Input: []byte(`{"report":"daily"}`)},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Kind(), s.At.Equal(s.At.Truncate(time.Second)))

	p, _ := producer.New(nc, &producer.Config{Logger: quiet})
	defer p.Close()
	ev, err := p.Await(ctx, producer.DefaultSession, s.JobID(s.At), nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(ev.Data.Status, string(ev.Data.Result))

	// Output:
	// at true
	// completed {"report":"daily"}
}
