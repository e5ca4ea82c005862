package shellexec_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/toolq/toolq/internal/embedded"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/tools/shellexec"
	"github.com/toolq/toolq/worker"
)

func check(err error) {
	if err != nil {
		panic(err)
	}
}

// A worker runs exec jobs under an allowlist: echo runs at once, seq waits
// for a person, who approves it with a signed decision.
func Example() {
	dir, err := os.MkdirTemp("", "toolq-example-")
	check(err)
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(&embedded.Config{StoreDir: dir})
	check(err)
	defer srv.Stop()
	nc, err := srv.Connect()
	check(err)
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The approver's key pair: the worker trusts the public key.
	kp, err := nkeys.CreateUser()
	check(err)
	seed, err := kp.Seed()
	check(err)
	pub, err := kp.PublicKey()
	check(err)

	w, err := worker.New(nc, &worker.Config{Logger: quiet})
	check(err)
	// Register makes the exec tool an extension of the worker: the worker
	// starts and stops it.
	_, err = shellexec.Register(w, nc, &shellexec.Config{
		Policy: shell.Policy{
			Security: shell.SecurityAllowlist, Ask: shell.AskOnMiss,
			Allowlist: []string{"/usr/bin/echo"},
		},
		Approvers: []string{pub},
		Logger:    quiet,
	})
	check(err)
	check(w.Start(ctx))
	defer func() { check(w.Stop(ctx)) }()

	p, err := producer.New(nc, &producer.Config{Logger: quiet})
	check(err)
	defer p.Close()
	stdout := func(raw json.RawMessage) string {
		var r shell.Result
		check(json.Unmarshal(raw, &r))
		return strings.TrimSpace(r.Stdout)
	}

	job, err := p.Submit(ctx, shellexec.ToolExec, json.RawMessage(`{"command":"echo hello"}`), nil)
	check(err)
	ev, err := p.Await(ctx, job.Session, job.ID, nil)
	check(err)
	fmt.Println(ev.Data.Status, stdout(ev.Data.Result))

	job, err = p.Submit(ctx, shellexec.ToolExec, json.RawMessage(`{"command":"seq 2"}`), nil)
	check(err)
	ev, err = p.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
	check(err)
	var pending shellexec.PendingResult
	check(json.Unmarshal(ev.Data.Result, &pending))
	fmt.Println(ev.Data.Status, pending.Argv)

	dj, _, err := shellexec.Decide(ctx, p, pending.ApprovalID, shell.Approve, seed, nil)
	check(err)
	_, err = p.Await(ctx, dj.Session, dj.ID, nil)
	check(err)
	ev, err = p.Await(ctx, job.Session, job.ID, nil)
	check(err)
	fmt.Println(ev.Data.Status, strings.Fields(stdout(ev.Data.Result)))
	// Output:
	// completed hello
	// approval_pending [[/usr/bin/seq 2]]
	// completed [1 2]
}
