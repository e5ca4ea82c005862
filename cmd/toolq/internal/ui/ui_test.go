package ui

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/tools/codemode"
	"github.com/toolq/toolq/tools/shellexec"
	"github.com/toolq/toolq/worker"
)

// flaky is a tool that fails while broken: with one attempt, its job is
// dead-lettered.
type flaky struct{ broken atomic.Bool }

func (f *flaky) Handle(_ context.Context, job *contracts.Job) (json.RawMessage, error) {
	if f.broken.Load() {
		return nil, errors.New("flaky: the backend is down")
	}
	return job.Input, nil
}

// bundle is a bus with a worker (the builtins, exec with one trusted
// approver, and flaky) and a console on it.
type bundle struct {
	nc      *nats.Conn
	p       *producer.Producer
	console *Server
	url     string
	flaky   *flaky
	// seed is the trusted approver's nkey seed; tenantSeeds each
	// tenant's approver's.
	seed        string
	tenantSeeds map[string]string
}

// options are setup's: the console's configuration, and whether the
// worker runs code mode too.
type options struct {
	console  *Config
	codeMode bool
	// tenants are registered, each with an approver of its own, and
	// served by the worker.
	tenants []string
}

func setup(t *testing.T, cfg *Config) *bundle {
	t.Helper()
	return setupWith(t, &options{console: cfg})
}

func setupWith(t *testing.T, o *options) *bundle {
	t.Helper()
	cfg := o.console
	srv := testutil.StartJetStream(t)
	b := &bundle{nc: srv.Connect(t), flaky: &flaky{}}
	b.flaky.broken.Store(true)
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	b.seed = string(seed)

	ctx := testutil.Context(t, 30*time.Second)
	log := slog.New(slog.DiscardHandler)
	wnc := srv.Connect(t)
	b.tenantSeeds = map[string]string{}
	for _, name := range o.tenants {
		kp, err := nkeys.CreateUser()
		require.NoError(t, err)
		seed, err := kp.Seed()
		require.NoError(t, err)
		pub, err := kp.PublicKey()
		require.NoError(t, err)
		b.tenantSeeds[name] = string(seed)
		require.NoError(t, bus.AddTenant(ctx, testutil.JetStream(t, wnc), bus.Config{}, contracts.TenantRecord{Name: name, Approvers: []string{pub}}))
	}
	tenants := len(o.tenants) > 0
	w, err := worker.New(wnc, &worker.Config{Logger: log, Builtins: true, StopTimeout: time.Second, Tenants: tenants})
	require.NoError(t, err)
	require.NoError(t, w.Register("flaky", b.flaky, &worker.ToolConfig{Retry: worker.RetryPolicy{MaxAttempts: 1}}))
	_, err = shellexec.Register(w, wnc, &shellexec.Config{
		Policy: shell.Policy{Security: shell.SecurityAllowlist, Ask: shell.AskOnMiss}, Approvers: []string{pub}, Logger: log,
		Tenants: tenants,
	})
	require.NoError(t, err)
	if o.codeMode {
		eng, err := sandbox.NewEngine(ctx, &sandbox.EngineConfig{SnapshotKey: []byte("console-test-key-0123456789abcdef")})
		require.NoError(t, err)
		t.Cleanup(func() { _ = eng.Close(context.Background()) })
		_, err = codemode.Register(w, wnc, &codemode.Config{Engine: eng, Logger: log})
		require.NoError(t, err)
	}
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(ctx))
	})

	b.p, err = producer.New(b.nc, &producer.Config{Session: "agent", Logger: log})
	require.NoError(t, err)
	t.Cleanup(b.p.Close)

	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	c.Logger = log
	b.console, err = New(srv.Connect(t), &c)
	require.NoError(t, err)
	require.NoError(t, b.console.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, b.console.Stop(ctx))
	})
	b.url = b.console.URL()
	return b
}

// pendingExec submits command as an exec job and returns its id once it
// waits for approval.
func (b *bundle) pendingExec(t *testing.T, command string) string {
	t.Helper()
	ctx := testutil.Context(t, 20*time.Second)
	job, err := b.p.SubmitExec(ctx, &contracts.ExecInput{Command: command}, nil)
	require.NoError(t, err)
	ev, err := b.p.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
	require.NoError(t, err)
	require.Equal(t, contracts.StatusApprovalPending, ev.Data.Status)
	return job.ID
}

// deadLetter submits a flaky job that fails into the DLQ and returns its
// id once its failed event is out (the dead letter is written first).
func (b *bundle) deadLetter(t *testing.T) string {
	t.Helper()
	ctx := testutil.Context(t, 20*time.Second)
	job, err := b.p.Submit(ctx, "flaky", json.RawMessage(`{"n":1}`), nil)
	require.NoError(t, err)
	ev, err := b.p.Await(ctx, job.Session, job.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	return job.ID
}

// get fetches path of the console with header pairs.
func get(t *testing.T, url string, hdr ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(testutil.Context(t, 10*time.Second), http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}
