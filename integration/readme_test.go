package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/embedded"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/tools/codemode"
	"github.com/toolq/toolq/worker"
)

// readmeRequester is the README's requester snippet, as written.
//
//nolint:errcheck,gosec // the README's snippet, as written
func readmeRequester(ctx context.Context, url string) {
	nc, _ := nats.Connect(url)
	p, _ := producer.New(nc, &producer.Config{Session: "agent-7"})
	job, _ := p.Submit(ctx, "shout", json.RawMessage(`"hello"`), nil)
	ev, _ := p.Await(ctx, job.Session, job.ID, nil) // the terminal CloudEvent
	fmt.Println(ev.Data.Status, string(ev.Data.Result))

	// typed helpers per tool: a code-mode run and its CodeModeResult
	run, _ := p.SubmitCode(ctx, &contracts.CodeModeExecInput{Code: "return 6 * 7"}, nil)
	res, _ := p.AwaitCodeMode(ctx, run.Session, run.ID, nil)
	fmt.Println(res.Status, string(res.Value))
	p.Close()
	nc.Close()
}

// readmeWorker is the README's worker snippet, as written; it serves until
// ctx ends, then stops gracefully.
//
//nolint:errcheck,gosec,contextcheck // the README's snippet, as written: the stop gets a fresh deadline because ctx has ended
func readmeWorker(ctx context.Context, nc *nats.Conn, key []byte) error {
	w, _ := worker.New(nc, &worker.Config{})
	w.Register("shout", worker.HandlerFunc(func(ctx context.Context, j *contracts.Job) (json.RawMessage, error) {
		return json.RawMessage(strings.ToUpper(string(j.Input))), nil
	}), &worker.ToolConfig{Concurrency: 32})
	engine, _ := sandbox.NewEngine(ctx, &sandbox.EngineConfig{SnapshotKey: key}) // the same key on every worker
	defer engine.Close(ctx)
	codemode.Register(w, nc, &codemode.Config{Engine: engine})
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done() // e.g. signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w.Stop(stopCtx)
	return nil
}

// Example_readme runs the README's Go snippets against an embedded server:
// the worker serves, the requester submits and reads typed results.
func Example_readme() {
	dir, err := os.MkdirTemp("", "toolq-readme-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(&embedded.Config{StoreDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		panic(err)
	}
	defer srv.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	key := []byte("readme example key: 32 bytes, ok")
	wnc, err := srv.Connect()
	if err != nil {
		panic(err)
	}
	defer wnc.Close()

	wctx, stopWorker := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- readmeWorker(wctx, wnc, key) }()
	// A requester needs toolq's streams, which the worker creates when it
	// starts (as `toolq dev` does): wait until it serves "shout".
	if err := waitForConsumer(ctx, wnc, "shout"); err != nil {
		panic(err)
	}

	readmeRequester(ctx, srv.URL())
	stopWorker()
	if err := <-served; err != nil {
		panic(err)
	}
	// Output:
	// completed "HELLO"
	// completed 42
}

// waitForConsumer polls the server until the durable consumer of tool exists.
func waitForConsumer(ctx context.Context, nc *nats.Conn, tool string) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	s := contracts.Subjects{}
	for {
		if _, err := js.Consumer(ctx, s.JobsStream(), s.ConsumerName(tool)); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no worker serves %s: %w", tool, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestReadmeGoSnippets keeps the README honest: every Go block of README.md
// must appear, line for line, in one of the snippet functions above, which
// Example_readme compiles and runs.
func TestReadmeGoSnippets(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	self, err := os.ReadFile("readme_test.go")
	require.NoError(t, err)
	code := normalize(string(self))

	blocks := goBlocks(string(readme))
	require.NotEmpty(t, blocks, "README.md has no ```go block")
	for i, b := range blocks {
		found := strings.Contains(code, normalize(b)) // not require.Contains: it would print the whole file
		require.True(t, found, "README Go block %d is not in readme_test.go as written:\n%s", i+1, b)
	}
}

// goBlocks returns the bodies of the ```go fences of a Markdown text.
func goBlocks(md string) []string {
	var blocks []string
	var cur []string
	in := false
	sc := bufio.NewScanner(strings.NewReader(md))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !in && strings.TrimSpace(line) == "```go":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, line)
		}
	}
	return blocks
}

// normalize drops indentation and blank lines, so a snippet matches the
// body of the function it was taken from.
func normalize(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
