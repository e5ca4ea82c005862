package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/embedded"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

// A worker with one tool, a producer that submits a job to it and awaits
// its terminal event, on an in-process NATS server.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, _ := os.MkdirTemp("", "toolq-example-")
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(&embedded.Config{StoreDir: dir})
	if err != nil {
		panic(err)
	}
	defer srv.Stop()

	wnc, _ := srv.Connect()
	defer wnc.Close()
	w, _ := worker.New(wnc, &worker.Config{Logger: quiet})
	_ = w.Register("shout", worker.HandlerFunc(func(_ context.Context, j *contracts.Job) (json.RawMessage, error) {
		var s string
		if err := json.Unmarshal(j.Input, &s); err != nil {
			return nil, worker.Permanent(contracts.Errorf(contracts.CodeInvalidInput, "want a string"))
		}
		return json.Marshal(strings.ToUpper(s))
	}), &worker.ToolConfig{Concurrency: 8})
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = w.Stop(ctx) }()

	pnc, _ := srv.Connect()
	defer pnc.Close()
	p, _ := producer.New(pnc, &producer.Config{Session: "agent-7"})
	defer p.Close()
	job, _ := p.Submit(ctx, "shout", json.RawMessage(`"hello"`), nil)
	ev, _ := p.Await(ctx, job.Session, job.ID, nil)
	fmt.Println(ev.Type, string(ev.Data.Result))

	bad, _ := p.Submit(ctx, "shout", json.RawMessage(`42`), nil)
	ev, _ = p.Await(ctx, bad.Session, bad.ID, nil)
	fmt.Println(ev.Type, ev.Data.Error.Code)
	// Output:
	// toolq.job.completed "HELLO"
	// toolq.job.failed invalid_input
}
