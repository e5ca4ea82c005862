package producer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/embedded"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/tools/codemode"
	"github.com/toolq/toolq/worker"
)

// startBus starts an in-process NATS server with JetStream, as `toolq dev` does.
func startBus() (srv *embedded.Server, stop func()) {
	dir, err := os.MkdirTemp("", "toolq-example-")
	if err != nil {
		panic(err)
	}
	srv, err = embedded.Start(&embedded.Config{StoreDir: dir})
	if err != nil {
		panic(err)
	}
	return srv, func() { srv.Stop(); _ = os.RemoveAll(dir) }
}

// A requester submits a job, a worker runs it, and the requester reads the
// result as a Go value.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, stop := startBus()
	defer stop()

	// The worker side: one tool that adds two numbers.
	type addInput struct{ A, B int }
	type addResult struct {
		Sum int `json:"sum"`
	}
	wnc, _ := srv.Connect()
	defer wnc.Close()
	w, _ := worker.New(wnc, &worker.Config{Logger: quiet})
	_ = w.Register("add", worker.HandlerFunc(func(_ context.Context, j *contracts.Job) (json.RawMessage, error) {
		var in addInput
		if err := json.Unmarshal(j.Input, &in); err != nil {
			return nil, worker.Permanent(contracts.Errorf(contracts.CodeInvalidInput, "want {A, B}"))
		}
		return json.Marshal(addResult{Sum: in.A + in.B})
	}), nil)
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = w.Stop(ctx) }()

	// The requester side: contracts and producer only.
	pnc, _ := srv.Connect()
	defer pnc.Close()
	p, _ := producer.New(pnc, &producer.Config{Session: "agent-7", Logger: quiet})
	defer p.Close()
	input, _ := json.Marshal(addInput{A: 2, B: 40})
	job, err := p.Submit(ctx, "add", input, nil)
	if err != nil {
		panic(err)
	}
	ev, err := p.Await(ctx, job.Session, job.ID, nil)
	if err != nil {
		panic(err)
	}
	res, err := producer.DecodeResult[addResult](ev)
	if err != nil {
		panic(err)
	}
	fmt.Println(ev.Data.Status, res.Sum)

	bad, _ := p.Submit(ctx, "add", json.RawMessage(`"two"`), nil)
	ev, _ = p.Await(ctx, bad.Session, bad.ID, nil)
	_, err = producer.DecodeResult[addResult](ev)
	fmt.Println(ev.Data.Status, err)
	// Output:
	// completed 42
	// failed invalid_input: want {A, B}
}

// A code-mode run calls a tool from guest code. Its nested call is a job of
// its own, so the run suspends (waiting); a wait job resumes it once the
// call is back, and the requester reads the typed CodeModeResult each time.
// The requester imports neither the sandbox nor code mode: only the
// worker's side does.
func ExampleProducer_SubmitCode() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, stop := startBus()
	defer stop()

	// A worker with code mode and the builtin tools (noop among them).
	wnc, _ := srv.Connect()
	defer wnc.Close()
	w, _ := worker.New(wnc, &worker.Config{Logger: quiet, Builtins: true})
	engine, err := sandbox.NewEngine(ctx, &sandbox.EngineConfig{SnapshotKey: []byte("example key: use 32 random bytes")})
	if err != nil {
		panic(err)
	}
	defer engine.Close(ctx)
	// Code mode becomes the worker's extension: w.Start starts it first,
	// w.Stop stops it last.
	if _, err := codemode.Register(w, wnc, &codemode.Config{Engine: engine, Logger: quiet}); err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = w.Stop(ctx) }()

	pnc, _ := srv.Connect()
	defer pnc.Close()
	p, _ := producer.New(pnc, &producer.Config{Session: "agent-7", Logger: quiet})
	defer p.Close()
	job, err := p.SubmitCode(ctx, &contracts.CodeModeExecInput{
		Code: `const echoed = await tools.callValue("toolq:core:noop", {n: 21});
text("doubling " + echoed.n);
return echoed.n * 2;`,
	}, nil)
	if err != nil {
		panic(err)
	}
	res, err := p.AwaitCodeMode(ctx, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status, res.Reason, res.PendingToolCalls[0].ToolID)

	wait, err := p.Wait(ctx, res.RunID, &producer.SubmitOpts{Session: job.Session})
	if err != nil {
		panic(err)
	}
	res, err = p.AwaitCodeMode(ctx, wait.Session, wait.ID, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Status, string(res.Value), res.Output[0].Text, res.Telemetry.NestedCalls, res.Err())
	// Output:
	// waiting pending_tools toolq:core:noop
	// completed 42 doubling 21 1 <nil>
}
