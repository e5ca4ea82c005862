package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/sandbox"
	"github.com/toolq/toolq/scheduler"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/tools/codemode"
	"github.com/toolq/toolq/tools/mcp"
	"github.com/toolq/toolq/tools/shellexec"
	"github.com/toolq/toolq/worker"
)

// The example keys of deploy/nats/tenants.conf, replaced by fresh ones.
const (
	acmeExampleKey     = "UBDZLVZYZHAIEZVKPZKHLGERGHHQXP52JLOHIDJO5QH3GW3LR54BK3QZ"
	globexExampleKey   = "UBOZUWEMU5RQ35PIJTIG2BF46KEIRK2RGKBZBVFWIRGHNB4S7RYQY2WI"
	approverExampleKey = "UB67T6C5ATSMBT4ZJ7AELG52PIQ2DUFW54YI6CPMPCCKGBAR6CWGXM3Z"
	// The tenants' exec approvers (TENANT_APPROVER users).
	acmeApproverExampleKey   = "UDBVUJXZSJQ6Q7HES53BTQTW5UYAMTX4REX7DCOZNHXHNW7CLH75R3U6"
	globexApproverExampleKey = "UCCQTAX26CL7NRJDLGXASSP2X3FXTQLXQVEKL2L7GZ4AYV22HQQ4HC4O"
	// tenantQueueLimit is the workers' cap of one tenant's queued jobs per tool.
	tenantQueueLimit = 3
	// secret is what the victim's job body and result carry.
	secret = "DB_PASSWORD-hunter2"
)

// tenancy is a real nats-server with the shipped tenants.conf, a worker in
// the toolq account serving every tenant, and one agent connection per
// tenant, each logged in with its own tenant's nkey.
type tenancy struct {
	srv          *testutil.ServerProcess
	wnc          *nats.Conn // the worker's connection (toolq account)
	wjs          jetstream.JetStream
	control      *nats.Conn // a user of the toolq account allowed everything
	sched        *nats.Conn // the scheduler's connection (toolq account)
	acme, globex *nats.Conn
	acmeP        *producer.Producer // the victim
	globexP      *producer.Producer // the attacker
	// The tenants' exec approvers: nkey users of the tenants' accounts
	// (TENANT_APPROVER) whose keys the tenants' records list.
	acmeApprover, globexApprover nkeys.KeyPair
	approverSeeds                map[string]string // tenant -> seed file
	approverConns                map[string]*nats.Conn
	holds                        chan string // job ids of hold jobs as they start

	mu       sync.Mutex
	releases map[string]chan struct{} // by hold job id
}

// release lets hold job id end (completed).
func (b *tenancy) release(id string) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, ok := b.releases[id]
	if !ok {
		ch = make(chan struct{})
		b.releases[id] = ch
	}
	return ch
}

// setupTenancy starts it; a tracer, when given, is the worker's.
func setupTenancy(t *testing.T, tracer ...worker.Tracer) *tenancy {
	t.Helper()
	conf, err := os.ReadFile(filepath.Join("..", "deploy", "nats", "tenants.conf"))
	require.NoError(t, err)
	acmeKP, acmePub := userKey(t)
	globexKP, globexPub := userKey(t)
	_, approverPub := userKey(t)
	acmeApprover, acmeApproverPub := userKey(t)
	globexApprover, globexApproverPub := userKey(t)
	for _, k := range []string{acmeExampleKey, globexExampleKey, approverExampleKey, acmeApproverExampleKey, globexApproverExampleKey} {
		require.Contains(t, string(conf), k, "the example key moved: update this test")
	}
	text := strings.NewReplacer(
		"$TOOLQ_WORKER_PASSWORD", `"worker-secret"`, "$TOOLQ_SCHEDULER_PASSWORD", `"scheduler-secret"`,
		acmeExampleKey, acmePub, globexExampleKey, globexPub, approverExampleKey, approverPub,
		acmeApproverExampleKey, acmeApproverPub, globexApproverExampleKey, globexApproverPub,
	).Replace(string(conf))
	// One addition, a user of the toolq account with every permission: it
	// stands in for the server when a test needs a real advisory.
	require.Contains(t, text, `{ user = "worker",`)
	text = strings.Replace(text, `{ user = "worker",`, `{ user = "control", password = "control-secret" }
      { user = "worker",`, 1)
	dir := t.TempDir()
	path := filepath.Join(dir, "tenants.conf")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600)) //nolint:gosec // G703: a fixed name in the test's temp dir
	b := &tenancy{
		holds: make(chan string, 16), releases: map[string]chan struct{}{},
		acmeApprover: acmeApprover, globexApprover: globexApprover,
		approverSeeds: map[string]string{}, approverConns: map[string]*nats.Conn{},
	}
	b.srv = testutil.StartServerProcess(t, filepath.Join(dir, "js"), "-c", path)

	connect := func(o ...nats.Option) *nats.Conn {
		o = append(o, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		nc, err := nats.Connect(b.srv.URL(), o...)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	b.wnc = connect(nats.UserInfo("worker", "worker-secret"))
	b.control = connect(nats.UserInfo("control", "control-secret"))
	b.sched = connect(nats.UserInfo("scheduler", "scheduler-secret"))
	b.wjs, err = jetstream.New(b.wnc)
	require.NoError(t, err)
	// The operator registers both tenants with their approvers (`toolq
	// tenant register --approver` does this).
	for name, key := range map[string]string{"ACME": acmeApproverPub, "GLOBEX": globexApproverPub} {
		require.NoError(t, bus.AddTenant(testutil.Context(t, 10*time.Second), b.wjs, bus.Config{TenantQueueLimit: tenantQueueLimit},
			contracts.TenantRecord{Name: name, Approvers: []string{key}}))
	}
	quietLog := slog.New(slog.DiscardHandler)
	wcfg := &worker.Config{Name: "w1", Builtins: true, Tenants: true, TenantQueueLimit: tenantQueueLimit, Logger: quietLog, StopTimeout: 5 * time.Second}
	if len(tracer) > 0 {
		wcfg.Tracer = tracer[0]
	}
	w, err := worker.New(b.wnc, wcfg)
	require.NoError(t, err)
	// hold runs until its job is cancelled or released; code-mode runs
	// can call it (toolq:core:hold).
	require.NoError(t, w.Register("hold", worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
		b.holds <- job.ID
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-b.release(job.ID):
			return json.RawMessage(`"released"`), nil
		}
	}), &worker.ToolConfig{Catalog: &contracts.CatalogTool{Description: "Hold until released."}}))
	// exec, with the default tenant's approver of the toolq account; the
	// tenants' approvers come from their records.
	_, err = shellexec.Register(w, b.wnc, &shellexec.Config{
		Policy: shell.Policy{
			Security: shell.SecurityAllowlist, Ask: shell.AskOnMiss, Allowlist: []string{"/usr/bin/echo"},
			EnvAllow: []string{"DB_PASSWORD"},
		},
		Runner:    shell.RunnerConfig{ScratchDir: t.TempDir()},
		Approvers: []string{approverPub}, Tenants: true, Logger: quietLog,
	})
	require.NoError(t, err)
	ctx := testutil.Context(t, 30*time.Second)
	engine, err := sandbox.NewEngine(ctx, &sandbox.EngineConfig{SnapshotKey: []byte("tenancy-key-0123456789abcdef0123456789")})
	require.NoError(t, err)
	_, err = codemode.Register(w, b.wnc, &codemode.Config{Engine: engine, Logger: quietLog})
	require.NoError(t, err)
	// An MCP server with a resource, once kept to ACME (acme-docs) and
	// once for every tenant (docs).
	docs := startMemoServer(t)
	_, err = mcp.Register(ctx, w, &mcp.Config{Logger: quietLog, Servers: map[string]mcp.ServerConfig{
		"acme-docs": {URL: docs, Tenants: []string{"ACME"}}, "docs": {URL: docs},
	}})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
		_ = engine.Close(sctx)
	})

	b.acme = connect(nats.Nkey(acmePub, acmeKP.Sign))
	b.globex = connect(nats.Nkey(globexPub, globexKP.Sign))
	// Both tenants use the same session name: sessions are not the wall.
	b.acmeP = tenantProducer(t, b.acme)
	b.globexP = tenantProducer(t, b.globex)
	for tenant, kp := range map[string]nkeys.KeyPair{"ACME": acmeApprover, "GLOBEX": globexApprover} {
		seed, err := kp.Seed()
		require.NoError(t, err)
		path := filepath.Join(dir, tenant+"-approver.nk")
		require.NoError(t, os.WriteFile(path, seed, 0o600)) //nolint:gosec // G703: a fixed name in the test's temp dir
		b.approverSeeds[tenant] = path
		pub, err := kp.PublicKey()
		require.NoError(t, err)
		b.approverConns[tenant] = connect(nats.Nkey(pub, kp.Sign))
	}
	return b
}

// startMemoServer serves an MCP server over streamable HTTP with one
// resource, memo://one.
func startMemoServer(t *testing.T) string {
	t.Helper()
	s := sdk.NewServer(&sdk.Implementation{Name: "memos", Version: "1"}, nil)
	s.AddResource(&sdk.Resource{URI: "memo://one", Name: "one"}, func(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
		return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: req.Params.URI, Text: "first memo"}}}, nil
	})
	sdk.AddTool(s, &sdk.Tool{Name: "count", Description: "Count memos."}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "1"}}}, nil, nil
	})
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(ts.Close)
	return ts.URL
}

func userKey(t *testing.T) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	return kp, pub
}

func tenantProducer(t *testing.T, nc *nats.Conn) *producer.Producer {
	t.Helper()
	p, err := producer.New(nc, &producer.Config{
		Session: "s1", TenantAccount: true, Timeout: 2 * time.Second, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// victimJob submits a noop job of ACME whose body (and so result) holds
// the secret, and waits until it completed.
func (b *tenancy) victimJob(t *testing.T, id string) *contracts.Job {
	t.Helper()
	ctx := testutil.Context(t, 20*time.Second)
	job, err := b.acmeP.Submit(ctx, worker.ToolNoop, json.RawMessage(`{"env":{"DB_PASSWORD":"`+secret+`"}}`), &producer.SubmitOpts{ID: id})
	require.NoError(t, err)
	ev, err := b.acmeP.Await(ctx, job.Session, job.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	require.Contains(t, string(ev.Data.Result), secret, "the victim reads its own result")
	return job
}

// refused fails unless an attacker's request got no answer that carries
// the victim's data: an error (no responders, permissions, timeout), or
// an answer without the secret and the victim's ids.
func refused(t *testing.T, what string, resp *nats.Msg, err error, victim ...string) {
	t.Helper()
	if err != nil {
		return
	}
	body := string(resp.Data) + fmt.Sprint(resp.Header)
	require.NotContains(t, body, secret, "%s leaked the victim's secret", what)
	for _, v := range victim {
		require.NotContains(t, body, v, "%s leaked %s", what, v)
	}
}

// drainHeard reads what the attacker's subscriptions got, failing on any
// message that carries one of the victim's strings, and returns the count.
func drainHeard(t *testing.T, subs []*nats.Subscription, forbidden ...string) int {
	t.Helper()
	heard := 0
	for _, sub := range subs {
		for {
			m, err := sub.NextMsg(100 * time.Millisecond)
			if err != nil {
				break
			}
			heard++
			for _, f := range forbidden {
				require.NotContains(t, string(m.Data), f, "on %s", m.Subject)
			}
		}
	}
	return heard
}

func short(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestTenancy runs the attacks of a tenant's agent on another tenant with
// the shipped deploy/nats/tenants.conf, against a real nats-server.
//
//nolint:paralleltest // the subtests share one server and run in order
func TestTenancy(t *testing.T) {
	b := setupTenancy(t)

	t.Run("a tenant works end to end", func(t *testing.T) {
		b.victimJob(t, "acme-own")
		ctx := testutil.Context(t, 20*time.Second)
		job, err := b.globexP.Submit(ctx, worker.ToolNoop, json.RawMessage(`{"mine":true}`), nil)
		require.NoError(t, err)
		ev, err := b.globexP.Await(ctx, job.Session, job.ID, nil)
		require.NoError(t, err)
		require.JSONEq(t, `{"mine":true}`, string(ev.Data.Result))
		// Each tenant's jobs are in a stream of its own.
		for _, tenant := range []string{"ACME", "GLOBEX"} {
			st, err := b.wjs.Stream(ctx, contracts.Subjects{}.TenantJobsStream(tenant))
			require.NoError(t, err)
			require.Equal(t, []string{"toolq.t." + tenant + ".jobs.>"}, st.CachedInfo().Config.Subjects)
			require.False(t, st.CachedInfo().Config.AllowMsgSchedules)
		}
	})

	t.Run("the scheduler role runs the NATS engine", func(t *testing.T) {
		ctx := testutil.Context(t, 30*time.Second)
		eng, err := scheduler.NewNATS(b.sched, &scheduler.NATSConfig{Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		require.NoError(t, eng.Start(ctx))
		t.Cleanup(func() { _ = eng.Stop(context.Background()) })
		s, err := eng.Create(ctx, &scheduler.Schedule{ID: "tick", In: time.Second, Job: scheduler.Job{
			Tool: worker.ToolNoop, Session: "sched", Input: json.RawMessage(`{"from":"scheduler"}`),
		}})
		require.NoError(t, err)
		wp, err := producer.New(b.wnc, &producer.Config{Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		t.Cleanup(wp.Close)
		ev, err := wp.Await(ctx, "sched", "tick-"+strconv.FormatInt(s.At.Unix(), 10), nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	})

	t.Run("1 reading other tenants' events and job bodies", func(t *testing.T) {
		// The attacker listens to everything it can name.
		var subs []*nats.Subscription
		for _, subject := range []string{"toolq.events.>", ">", "toolq.>", "toolq.t.>", "$JS.>", "$KV.>", "$O.>", "_INBOX.>"} {
			sub, err := b.globex.SubscribeSync(subject)
			require.NoError(t, err)
			subs = append(subs, sub)
		}
		_ = b.globex.Flush()
		victim := b.victimJob(t, "acme-read")
		// The attacker's own job ends after the victim's: every event of
		// the victim was published before the attacker's terminal one.
		ctx := testutil.Context(t, 20*time.Second)
		own, err := b.globexP.Submit(ctx, worker.ToolNoop, nil, nil)
		require.NoError(t, err)
		_, err = b.globexP.Await(ctx, own.Session, own.ID, nil)
		require.NoError(t, err)
		require.NotZero(t, drainHeard(t, subs, secret, victim.ID), "the attacker hears its own events")

		// Direct gets and MSG.GET, by wildcard, by sequence, by subject.
		for _, rq := range []struct{ subject, body string }{
			{"$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.events.>", ""},
			{"$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.events.s1." + victim.ID, ""},
			{"$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.events.s1.>", `{"seq":1}`},
			{"$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.t.ACME.events.>", ""},
			{"$JS.API.DIRECT.GET.TOOLQ_EVENTS", `{"seq":1}`},
			{"$JS.API.DIRECT.GET.TOOLQ_EVENTS", `{"last_by_subj":"toolq.t.ACME.events.>"}`},
			{"$JS.API.DIRECT.GET.TOOLQ_TENANT_JOBS", `{"seq":1}`},
			{"$JS.API.DIRECT.GET.TOOLQ_TENANT_JOBS.toolq.t.ACME.jobs.>", ""},
			{"$JS.API.DIRECT.GET.TOOLQ_DLQ.>", ""},
			{"$JS.API.STREAM.MSG.GET.TOOLQ_EVENTS", `{"seq":1}`},
			{"$JS.API.STREAM.MSG.GET.TOOLQ_EVENTS", `{"last_by_subj":"toolq.t.ACME.events.s1.` + victim.ID + `"}`},
			{"$JS.API.STREAM.MSG.GET.TOOLQ_TENANT_JOBS", `{"seq":1}`},
			{"$JS.API.STREAM.INFO.TOOLQ_EVENTS", `{"subjects_filter":">"}`},
			{"$JS.API.CONSUMER.CREATE.TOOLQ_EVENTS", `{"stream_name":"TOOLQ_EVENTS","config":{"deliver_policy":"all","ack_policy":"none"}}`},
			{"$JS.API.STREAM.LIST", ""},
		} {
			resp, err := b.globex.Request(rq.subject, []byte(rq.body), 500*time.Millisecond)
			refused(t, rq.subject, resp, err, victim.ID)
		}
		// The attacker's own direct get reads only its own subspace, even
		// with a wildcard.
		resp, err := b.globex.Request("$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.events.>", nil, time.Second)
		require.NoError(t, err)
		require.Contains(t, resp.Header.Get("Nats-Subject"), "toolq.t.GLOBEX.events.")
		// And the producer's own reader finds nothing of the victim's.
		_, err = b.globexP.Await(short(t), victim.Session, victim.ID, nil)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		// JetStream as a client sees no stream at all.
		gjs, err := jetstream.New(b.globex)
		require.NoError(t, err)
		_, err = gjs.Stream(short(t), "TOOLQ_EVENTS")
		require.Error(t, err)
		_, err = gjs.OrderedConsumer(short(t), "TOOLQ_EVENTS", jetstream.OrderedConsumerConfig{})
		require.Error(t, err)
	})

	t.Run("1b a tenant replays its own session's events, never another tenant's", func(t *testing.T) {
		victim := b.victimJob(t, "acme-replay")
		ctx := testutil.Context(t, 20*time.Second)
		collect := func(p *producer.Producer, opts *producer.ReadOpts) []*contracts.Event {
			t.Helper()
			var evs []*contracts.Event
			require.NoError(t, p.ReadEvents(ctx, victim.Session, opts, func(ev *contracts.Event) error {
				evs = append(evs, ev)
				return nil
			}))
			return evs
		}
		mine := collect(b.acmeP, &producer.ReadOpts{JobID: victim.ID})
		require.Len(t, mine, 1)
		require.Equal(t, contracts.StatusCompleted, mine[0].Data.Status)
		require.Contains(t, string(mine[0].Data.Result), secret)
		require.NotEmpty(t, collect(b.acmeP, nil), "the whole session")
		// The same session name from GLOBEX: its own events only.
		for _, ev := range collect(b.globexP, nil) {
			require.NotEqual(t, victim.ID, ev.Data.JobID)
			require.NotContains(t, string(ev.Data.Result), secret)
		}
		require.Empty(t, collect(b.globexP, &producer.ReadOpts{JobID: victim.ID}))
		// A request that names another tenant's replay subject stays in the
		// attacker's own subspace (or is refused).
		resp, err := b.globex.Request("toolq.t.ACME.replay."+victim.Session, nil, 500*time.Millisecond)
		refused(t, "replay of ACME's subject", resp, err, victim.ID)
		// A malformed body is refused with invalid_input and no event; a
		// since after every stored event replays none.
		resp, err = b.acme.Request("toolq.replay."+victim.Session, []byte(`{"jobId":"a b"}`), 2*time.Second)
		require.NoError(t, err)
		require.Equal(t, "0", resp.Header.Get(contracts.ReplayEndHeader))
		require.Contains(t, resp.Header.Get(contracts.ReplayErrorHeader), "invalid_input")
		later, _ := json.Marshal(contracts.ReplayRequest{Since: time.Now().Add(time.Hour)})
		resp, err = b.acme.Request("toolq.replay."+victim.Session, later, 2*time.Second)
		require.NoError(t, err)
		require.Equal(t, "0", resp.Header.Get(contracts.ReplayEndHeader), "nothing stored after since")
		require.Empty(t, resp.Header.Get(contracts.ReplayErrorHeader))

		// Following: the stored events, then a new job's as it ends.
		fctx, stop := context.WithCancel(ctx)
		defer stop()
		got := make(chan *contracts.Event, 64)
		done := make(chan error, 1)
		go func() {
			done <- b.acmeP.ReadEvents(fctx, victim.Session, &producer.ReadOpts{Follow: true}, func(ev *contracts.Event) error {
				got <- ev
				return nil
			})
		}()
		for ev := range got { // the stored events come first, the victim's among them
			if ev.Data.JobID == victim.ID {
				break
			}
		}
		next, err := b.acmeP.Submit(ctx, worker.ToolNoop, json.RawMessage(`{"n":2}`), &producer.SubmitOpts{Session: victim.Session})
		require.NoError(t, err)
		for ev := range got {
			if ev.Data.JobID == next.ID && ev.Data.Status.Terminal() {
				break
			}
		}
		stop()
		require.ErrorIs(t, <-done, context.Canceled)
	})

	t.Run("KV records and object-store snapshots of another tenant", func(t *testing.T) {
		ctx := testutil.Context(t, 20*time.Second)
		s := contracts.Subjects{}
		runs, err := b.wjs.KeyValue(ctx, s.RunsBucket()) // code mode made it
		require.NoError(t, err)
		_, err = runs.Put(ctx, "run-acme", []byte(`{"tenant":"ACME","env":"`+secret+`"}`))
		require.NoError(t, err)
		snaps, err := b.wjs.ObjectStore(ctx, s.SnapshotsBucket())
		require.NoError(t, err)
		_, err = snaps.PutBytes(ctx, "run-acme", []byte(secret))
		require.NoError(t, err)

		gjs, err := jetstream.New(b.globex)
		require.NoError(t, err)
		for _, bucket := range []string{s.RunsBucket(), s.CatalogBucket(), s.CancelsBucket(), s.ApprovalsBucket()} {
			_, err := gjs.KeyValue(short(t), bucket)
			require.Error(t, err, bucket)
		}
		_, err = gjs.ObjectStore(short(t), s.SnapshotsBucket())
		require.Error(t, err)
		for _, rq := range []struct{ subject, body string }{
			{"$JS.API.DIRECT.GET.KV_toolq_runs.$KV.toolq_runs.run-acme", ""},
			{"$JS.API.DIRECT.GET.KV_toolq_runs.$KV.toolq_runs.>", ""},
			{"$JS.API.DIRECT.GET.KV_toolq_runs", `{"seq":1}`},
			{"$JS.API.STREAM.MSG.GET.KV_toolq_runs", `{"last_by_subj":"$KV.toolq_runs.run-acme"}`},
			{"$JS.API.DIRECT.GET.OBJ_toolq_snapshots.$O.toolq_snapshots.C.>", ""},
			{"$JS.API.DIRECT.GET.OBJ_toolq_snapshots", `{"seq":2}`},
			{"$JS.API.STREAM.MSG.GET.OBJ_toolq_snapshots", `{"seq":2}`},
		} {
			resp, err := b.globex.Request(rq.subject, []byte(rq.body), 500*time.Millisecond)
			refused(t, rq.subject, resp, err, "run-acme")
		}
	})

	t.Run("2 cancelling another tenant's job by id", func(t *testing.T) {
		ctx := testutil.Context(t, 30*time.Second)
		// A pre-cancel of a guessed id, then the victim's job with it.
		require.NoError(t, b.globexP.Cancel(ctx, "s1", "acme-pre"))
		// The same from the victim's own tenant, in another session.
		require.NoError(t, b.acmeP.Cancel(ctx, "intruder", "acme-pre"))
		require.NoError(t, b.acme.Flush())
		b.victimJob(t, "acme-pre")

		// A running job: the attacker cancels it by id.
		victim, err := b.acmeP.Submit(ctx, "hold", nil, &producer.SubmitOpts{ID: "acme-hold"})
		require.NoError(t, err)
		require.Equal(t, "acme-hold", <-b.holds)
		require.NoError(t, b.globexP.Cancel(ctx, victim.Session, victim.ID))
		require.NoError(t, b.globex.Flush())
		// An agent of the victim's own tenant, in another session, cancels
		// it by id: a cancel binds the session too.
		require.NoError(t, b.acmeP.Cancel(ctx, "intruder", victim.ID))
		require.NoError(t, b.acme.Flush())
		// The victim cancels a job of its own, which ends: the worker has
		// heard the cancels sent before (the same bucket, the same feed).
		own, err := b.acmeP.Submit(ctx, "hold", nil, &producer.SubmitOpts{ID: "acme-own-hold"})
		require.NoError(t, err)
		require.Equal(t, "acme-own-hold", <-b.holds)
		require.NoError(t, b.acmeP.Cancel(ctx, own.Session, own.ID))
		ev, err := b.acmeP.Await(ctx, own.Session, own.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCancelled, ev.Data.Status, "a tenant cancels its own job")
		// The attacked job was not cancelled: released, it completes.
		close(b.release(victim.ID))
		ev, err = b.acmeP.Await(ctx, victim.Session, victim.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	})

	t.Run("2b wiping the cancels bucket with a rollup", func(t *testing.T) {
		ctx := testutil.Context(t, 10*time.Second)
		cancels, err := b.wjs.KeyValue(ctx, contracts.Subjects{}.CancelsBucket())
		require.NoError(t, err)
		marked := contracts.CancelKey("ACME", "s1", "acme-marked")
		_, err = cancels.Put(ctx, marked, []byte("s1"))
		require.NoError(t, err)
		for _, rollup := range []string{"all", "sub"} {
			msg := &nats.Msg{
				Subject: contracts.KVSubject(contracts.Subjects{}.CancelsBucket(), "x"), Data: []byte("s1"),
				Header: nats.Header{"Nats-Rollup": []string{rollup}},
			}
			gjs, err := jetstream.New(b.globex)
			require.NoError(t, err)
			_, _ = gjs.PublishMsg(short(t), msg)
		}
		e, err := cancels.Get(ctx, marked)
		require.NoError(t, err, "another tenant's cancel mark was wiped")
		require.Equal(t, "s1", string(e.Value()))
	})

	t.Run("3 forging a nested result", func(t *testing.T) {
		gjs, err := jetstream.New(b.globex)
		require.NoError(t, err)
		forged := fmt.Sprintf(`{"id":"forged-1","tool":%q,"session":"s1","input":{"run_id":"r1","call_id":"c1","result":"pwned"},"created_at":%q}`,
			contracts.ToolCodeModeResult, time.Now().UTC().Format(time.RFC3339Nano))
		_, err = gjs.Publish(short(t), "toolq.jobs."+contracts.ToolCodeModeResult, []byte(forged))
		require.Error(t, err, "agents must not publish nested results")
		_, err = gjs.Publish(short(t), "toolq.jobs."+contracts.ToolExecDecide, []byte(forged))
		require.Error(t, err, "agents must not publish exec decisions")
		for _, tenant := range []string{"ACME", "GLOBEX"} {
			n, err := subjectCount(b, contracts.Subjects{}.TenantJobsStream(tenant), "toolq.t.*.jobs."+contracts.ToolCodeModeResult)
			require.NoError(t, err)
			require.Zero(t, n)
		}

		// The side route: an ordinary job that names a parent run, whose
		// end the worker reports as a nested result — to the attacker's
		// own tenant's code_mode.result, where no such run exists.
		ctx := testutil.Context(t, 20*time.Second)
		job, err := b.globexP.Submit(ctx, worker.ToolNoop, json.RawMessage(`"pwned"`), &producer.SubmitOpts{
			Parent: &contracts.Parent{RunID: "acme-run", CallID: "c1", Tool: contracts.ToolCodeModeResult, Token: "guessed"},
		})
		require.NoError(t, err)
		ev, err := b.globexP.Await(ctx, job.Session, job.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
		report, err := b.globexP.Await(ctx, job.Session, contracts.ToolResultJobID(job.ID), nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCompleted, report.Data.Status, "%v", report.Data.Error)
		require.JSONEq(t, `{"recorded":false,"reason":"run gone"}`, string(report.Data.Result))
		n, err := subjectCount(b, contracts.Subjects{}.JobsStream(), contracts.Subjects{}.Job(contracts.ToolCodeModeResult))
		require.NoError(t, err)
		require.Zero(t, n, "a nested result reached the toolq account's jobs")
		// A parent naming another continuation (exec.decide, which the
		// agent may not publish itself) is refused.
		job, err = b.globexP.Submit(ctx, worker.ToolNoop, nil, &producer.SubmitOpts{
			Parent: &contracts.Parent{RunID: "acme-run", CallID: "c1", Tool: contracts.ToolExecDecide},
		})
		require.NoError(t, err)
		ev, err = b.globexP.Await(ctx, job.Session, job.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusFailed, ev.Data.Status)
		require.Equal(t, contracts.CodeInvalidInput, ev.Data.Error.Code)
	})

	t.Run("2c a tenant's cancel ends its suspended run and its parked exec job", func(t *testing.T) {
		ctx := testutil.Context(t, 60*time.Second)
		run, err := b.acmeP.SubmitCode(ctx, &contracts.CodeModeExecInput{
			Code: `return await tools.callValue("toolq:core:hold", {});`, AutoResume: true,
		}, &producer.SubmitOpts{ID: "acme-cancel-run", Session: "cancels"})
		require.NoError(t, err)
		waiting, err := b.acmeP.AwaitCodeMode(ctx, run.Session, run.ID, &producer.AwaitOpts{Parked: true})
		require.NoError(t, err)
		require.Equal(t, contracts.CodeModeWaiting, waiting.Status, waiting.Error)
		nested := <-b.holds
		// Another tenant's cancel of the same ids does nothing.
		_ = b.globexP.Cancel(short(t), run.Session, run.ID)
		require.NoError(t, b.acmeP.Cancel(ctx, run.Session, run.ID))
		ev, err := b.acmeP.Await(ctx, run.Session, run.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCancelled, ev.Data.Status, "the run's exec job ends cancelled in ACME's events")
		nev, err := b.acmeP.Await(ctx, run.Session, nested, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCancelled, nev.Data.Status, "its nested call is cancelled in ACME too")

		job, err := b.acmeP.Submit(ctx, "exec", json.RawMessage(`{"command":"uname -a"}`), &producer.SubmitOpts{ID: "acme-cancel-exec", Session: "cancels"})
		require.NoError(t, err)
		pev, err := b.acmeP.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
		require.NoError(t, err)
		require.Equal(t, contracts.StatusApprovalPending, pev.Data.Status)
		require.NoError(t, b.acmeP.Cancel(ctx, job.Session, job.ID))
		ev, err = b.acmeP.Await(ctx, job.Session, job.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCancelled, ev.Data.Status, "a parked exec job ends cancelled in ACME's events")
	})

	t.Run("3b code mode for a tenant, and another tenant's reach into its run", func(t *testing.T) {
		ctx := testutil.Context(t, 60*time.Second)
		run, err := b.acmeP.SubmitCode(ctx, &contracts.CodeModeExecInput{
			Code:       `const v = await tools.callValue("toolq:core:hold", {}); return {v, secret: "` + secret + `"};`,
			AutoResume: true,
		}, &producer.SubmitOpts{ID: "acme-run"})
		require.NoError(t, err)
		waiting, err := b.acmeP.AwaitCodeMode(ctx, run.Session, run.ID, &producer.AwaitOpts{Parked: true})
		require.NoError(t, err)
		require.Equal(t, contracts.CodeModeWaiting, waiting.Status, waiting.Error)
		require.Len(t, waiting.PendingToolCalls, 1)
		call := waiting.PendingToolCalls[0]
		nested := <-b.holds
		require.Equal(t, contracts.NestedJobID(run.ID, call.CallID), nested)
		// On the run's session's lane of the tenant's subjects.
		n, err := subjectCount(b, contracts.Subjects{}.TenantJobsStream("ACME"), contracts.Subjects{}.TenantSessionJob("ACME", &contracts.Job{Tool: "hold", Session: run.Session}))
		require.NoError(t, err)
		require.Equal(t, uint64(1), n, "the nested call is in the tenant's own stream")

		// The attacker waits on the victim's run id, in the same session name.
		wait, err := b.globexP.Wait(ctx, run.ID, nil)
		require.NoError(t, err)
		wev, err := b.globexP.Await(ctx, wait.Session, wait.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusFailed, wev.Data.Status)
		require.Equal(t, contracts.CodeInvalidInput, wev.Data.Error.Code)
		require.Contains(t, wev.Data.Error.Message, "unavailable or expired")
		require.NotContains(t, string(wev.Data.Result)+wev.Data.Error.Message, secret)

		// It cannot publish a result, even with the right ids.
		tr, err := json.Marshal(contracts.ToolResult{RunID: run.ID, CallID: call.CallID, JobID: nested, Status: contracts.StatusCompleted, Result: json.RawMessage(`"pwned"`)})
		require.NoError(t, err)
		forged, err := json.Marshal(contracts.Job{ID: "forged-r", Tool: contracts.ToolCodeModeResult, Session: run.Session, Input: tr, CreatedAt: time.Now().UTC()})
		require.NoError(t, err)
		gjs, err := jetstream.New(b.globex)
		require.NoError(t, err)
		_, err = gjs.Publish(short(t), "toolq.jobs."+contracts.ToolCodeModeResult, forged, jetstream.WithMsgID("forged-r"))
		require.Error(t, err, "agents must not publish nested results")
		// Nor can anyone inside the toolq account who lacks the call's
		// token: the result is refused and the run is untouched.
		_, err = b.wjs.Publish(ctx, contracts.Subjects{}.TenantJob("ACME", contracts.ToolCodeModeResult), forged, jetstream.WithMsgID("forged-r"))
		require.NoError(t, err)
		fev, err := b.acmeP.Await(ctx, run.Session, "forged-r", nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusFailed, fev.Data.Status)
		require.Equal(t, contracts.CodeInvalidInput, fev.Data.Error.Code)
		require.Contains(t, fev.Data.Error.Message, "token")

		// The real result completes the run with the real value.
		close(b.release(nested))
		final, err := b.acmeP.AwaitCodeMode(ctx, run.Session, run.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.CodeModeCompleted, final.Status, final.Error)
		require.JSONEq(t, `{"v":"released","secret":"`+secret+`"}`, string(final.Value))
	})

	t.Run("4 rewriting the catalog", func(t *testing.T) {
		ctx := testutil.Context(t, 10*time.Second)
		cat, err := b.wjs.KeyValue(ctx, contracts.Subjects{}.CatalogBucket())
		require.NoError(t, err)
		key := contracts.CatalogKey("toolq:core:noop")
		before, err := cat.Get(ctx, key)
		require.NoError(t, err)
		gjs, err := jetstream.New(b.globex)
		require.NoError(t, err)
		for _, subject := range []string{
			contracts.KVSubject(contracts.Subjects{}.CatalogBucket(), key),
			contracts.KVSubject(contracts.Subjects{}.CatalogBucket(), "globex.flood"),
		} {
			_, err = gjs.Publish(short(t), subject, []byte(`{"id":"toolq:core:noop","tool":"evil","sideEffects":false}`))
			require.Error(t, err, subject)
		}
		after, err := cat.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, before.Revision(), after.Revision())

		// A tenant's client tools land under its own prefix, which only
		// its own runs read (tools/codemode's catalog).
		require.NoError(t, b.globexP.RegisterClientTool(ctx, contracts.CatalogTool{ID: "client:app:lookup", Name: "lookup", Description: "GLOBEX's"}))
		own, err := cat.Get(ctx, contracts.TenantCatalogKey("GLOBEX", "client:app:lookup"))
		require.NoError(t, err)
		require.Contains(t, string(own.Value()), "GLOBEX's")
		_, err = cat.Get(ctx, contracts.CatalogKey("client:app:lookup"))
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "nothing reached the default tenant's keys")
		// A roll-up through the import would purge every key of an
		// ordinary bucket: this one refuses roll-ups.
		msg := nats.NewMsg(contracts.KVSubject(contracts.Subjects{}.CatalogBucket(), "client.app.lookup"))
		msg.Data = []byte(`{}`)
		msg.Header.Set(nats.MsgRollup, nats.MsgRollupAll)
		_, err = gjs.PublishMsg(short(t), msg)
		require.Error(t, err, "a roll-up put into the catalog")
		after, err = cat.Get(ctx, key)
		require.NoError(t, err)
		require.Equal(t, before.Revision(), after.Revision(), "the workers' entries survive")
	})

	t.Run("4b MCP servers and client tools are the tenant's own", func(t *testing.T) {
		ctx := testutil.Context(t, 30*time.Second)
		run := func(p *producer.Producer, code string) json.RawMessage {
			t.Helper()
			job, err := p.SubmitCode(ctx, &contracts.CodeModeExecInput{Code: code, AutoResume: true}, nil)
			require.NoError(t, err)
			res, err := p.AwaitCodeMode(ctx, job.Session, job.ID, nil)
			require.NoError(t, err)
			require.Equal(t, contracts.CodeModeCompleted, res.Status, res.Error)
			return res.Value
		}
		// ACME's runs have both servers; GLOBEX's only the shared one and
		// no way to ACME's by id.
		code := `const out = {ns: Object.keys(MCP).sort(), memo: (await MCP.docs.resources.read({uri: "memo://one"})).contents[0].text};
			try { await tools.call("mcp:acme-docs:resources--read", {uri: "memo://one"}); out.byID = "called"; } catch (e) { out.byID = e.message.includes("not in this run's catalog") ? "refused" : e.message; }
			if (MCP.acmeDocs) out.acme = (await MCP.acmeDocs.resources.read({uri: "memo://one"})).contents[0].text;
			return out;`
		require.JSONEq(t, `{"ns":["acmeDocs","docs"],"memo":"first memo","byID":"tool \"mcp:acme-docs:resources--read\" is an MCP tool: call it as MCP.acmeDocs.resources.read(input)","acme":"first memo"}`, string(run(b.acmeP, code)))
		require.JSONEq(t, `{"ns":["docs"],"memo":"first memo","byID":"refused"}`, string(run(b.globexP, code)))

		// Client tools of one id: ACME's lives a second, GLOBEX's the
		// default day; each tenant's runs see only their own.
		require.NoError(t, b.acmeP.RegisterClientTool(ctx, contracts.CatalogTool{ID: "client:app:note", Name: "note", Description: "ACME's note", TTLSeconds: 1}))
		require.NoError(t, b.globexP.RegisterClientTool(ctx, contracts.CatalogTool{ID: "client:app:note", Name: "note", Description: "GLOBEX's note"}))
		registered := time.Now()
		note := `const e = ALL_TOOLS.find((t) => t.id === "client:app:note"); return e ? e.description : "none";`
		for string(run(b.acmeP, note)) != `"none"` {
			require.NoError(t, ctx.Err(), "ACME's client tool outlived its TTL")
			time.Sleep(100 * time.Millisecond) // polling the catalog through runs
		}
		require.GreaterOrEqual(t, time.Since(registered), time.Second)
		require.JSONEq(t, `"GLOBEX's note"`, string(run(b.globexP, note)))
	})

	t.Run("5 message schedules as a side door", func(t *testing.T) {
		gjs, err := jetstream.New(b.globex)
		require.NoError(t, err)
		at := "@at " + time.Now().Add(time.Second).UTC().Format(time.RFC3339)
		for _, rq := range []struct{ subject, target string }{
			{"toolq.jobs.noop", "toolq.jobs.exec.decide"},
			{"toolq.jobs.noop", "toolq.t.ACME.jobs.noop"},
			{"toolq.jobs.sched", "toolq.t.GLOBEX.jobs.noop"},
			{"toolq.schedules.x", "toolq.jobs.noop"},
		} {
			msg := &nats.Msg{Subject: rq.subject, Data: []byte(`{}`), Header: nats.Header{
				"Nats-Schedule": []string{at}, "Nats-Schedule-Target": []string{rq.target},
			}}
			_, err := gjs.PublishMsg(short(t), msg)
			require.Error(t, err, "%s -> %s", rq.subject, rq.target)
		}
	})

	t.Run("6 id collisions across sessions and tenants", func(t *testing.T) {
		ctx := testutil.Context(t, 20*time.Second)
		victim := b.victimJob(t, "order-42")
		// The same id from another session of the same tenant: reported.
		dup, err := b.acmeP.Submit(ctx, worker.ToolNoop, nil, &producer.SubmitOpts{ID: "order-42", Session: "s2"})
		require.ErrorIs(t, err, producer.ErrDuplicate)
		require.Equal(t, victim.ID, dup.ID)
		// From another tenant, in the same session name: the tenant's own
		// job, which runs and answers the attacker with its own input; the
		// victim's job and result are untouched.
		own, err := b.globexP.Submit(ctx, worker.ToolNoop, json.RawMessage(`"globex's"`), &producer.SubmitOpts{ID: "order-42", Session: victim.Session})
		require.NoError(t, err)
		ev, err := b.globexP.Await(ctx, own.Session, own.ID, nil)
		require.NoError(t, err)
		require.JSONEq(t, `"globex's"`, string(ev.Data.Result))
		require.NotContains(t, string(ev.Data.Result), secret)
		vev, err := b.acmeP.Await(ctx, victim.Session, victim.ID, nil)
		require.NoError(t, err)
		require.Contains(t, string(vev.Data.Result), secret)
	})

	t.Run("8 exec approvals are the tenant's own", func(t *testing.T) { b.execApprovals(t) })

	t.Run("a tenant's queue is capped, not the others'", func(t *testing.T) {
		ctx := testutil.Context(t, 10*time.Second)
		var err error
		for range tenantQueueLimit + 1 {
			if _, err = b.globexP.Submit(ctx, "unserved", nil, nil); err != nil {
				break
			}
		}
		require.Error(t, err, "a submit past the tenant's queue limit")
		_, err = b.globexP.Submit(ctx, "unserved2", nil, nil)
		require.Error(t, err, "the limit is the tenant's over all tools")
		_, err = b.acmeP.Submit(ctx, "unserved", nil, nil)
		require.NoError(t, err, "another tenant's queue is its own")
	})

	t.Run("7 forged MAX_DELIVERIES advisory", func(t *testing.T) {
		ctx := testutil.Context(t, 20*time.Second)
		s := contracts.Subjects{}
		// Two queued jobs nobody serves, in the toolq account's jobs stream.
		var seqs []uint64
		for i := range 2 {
			data, err := json.Marshal(&contracts.Job{ID: fmt.Sprintf("queued-%d", i), Tool: "unserved", Session: "s1", CreatedAt: time.Now()})
			require.NoError(t, err)
			ack, err := b.wjs.Publish(ctx, s.Job("unserved"), data)
			require.NoError(t, err)
			seqs = append(seqs, ack.Sequence)
		}
		advisory := func(seq uint64) []byte {
			return fmt.Appendf(nil, `{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":%q,"consumer":"worker_unserved","stream_seq":%d,"deliveries":5}`,
				s.JobsStream(), seq)
		}
		subject := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + s.JobsStream() + ".worker_unserved"
		// The tool's consumer exists (as a worker of it would make it) but
		// has delivered neither job.
		_, err := b.wjs.CreateOrUpdateConsumer(ctx, s.JobsStream(), jetstream.ConsumerConfig{
			Durable: s.ConsumerName("unserved"), FilterSubject: s.Job("unserved"), AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 5,
		})
		require.NoError(t, err)
		// The attacker's forgery, for the first job: not even delivered to
		// the toolq account.
		_ = b.globex.Publish(subject, advisory(seqs[0]))
		_ = b.globex.Flush()
		// The same advisory from inside the toolq account, for the second:
		// the worker hears it, checks it against the consumer, and refuses.
		require.NoError(t, b.control.Publish(subject, advisory(seqs[1])))
		require.NoError(t, b.control.Flush())
		time.Sleep(500 * time.Millisecond) // the worker acts within milliseconds on a real one
		st, err := b.wjs.Stream(ctx, s.JobsStream())
		require.NoError(t, err)
		for i, seq := range seqs {
			m, err := st.GetMsg(ctx, seq)
			require.NoError(t, err, "a forged advisory removed queued job %d", i)
			require.True(t, bytes.Contains(m.Data, fmt.Appendf(nil, "queued-%d", i)))
		}
	})
}

// subjectCount is how many messages of stream match filter.
func subjectCount(b *tenancy, stream, filter string) (uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := b.wjs.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}

// execApprovals: ACME's exec command that needs approval parks; GLOBEX's
// approver, logged in as GLOBEX's TENANT_APPROVER, cannot read its plan
// (whose env holds the secret) and cannot decide it, even signing for the
// right id and hash; ACME's approver approves it with `toolq approve`
// under ACME's credentials, reading the plan from ACME's own events, and
// it runs.
func (b *tenancy) execApprovals(t *testing.T) {
	t.Helper()
	const id = "acme-exec"
	gx := b.approverConns["GLOBEX"]
	// The attacker's approver listens to everything it can name.
	var subs []*nats.Subscription
	for _, subject := range []string{">", "toolq.>", "toolq.events.>", "$KV.>", "_INBOX.>"} {
		sub, err := gx.SubscribeSync(subject)
		require.NoError(t, err)
		subs = append(subs, sub)
	}
	require.NoError(t, gx.Flush())

	ctx := testutil.Context(t, 60*time.Second)
	job, err := b.acmeP.SubmitExec(ctx, &contracts.ExecInput{Command: "seq 2", Env: map[string]string{"DB_PASSWORD": secret}}, &producer.SubmitOpts{ID: id})
	require.NoError(t, err)
	ev, err := b.acmeP.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
	require.NoError(t, err)
	require.Equal(t, contracts.StatusApprovalPending, ev.Data.Status, "%s %v", ev.Data.Result, ev.Data.Error)
	var pending contracts.ExecPendingResult
	require.NoError(t, json.Unmarshal(ev.Data.Result, &pending))
	require.Equal(t, "ACME", pending.Tenant)
	require.Equal(t, secret, pending.Env["DB_PASSWORD"], "ACME's approver will see the env")

	// GLOBEX's approver cannot read ACME's plan: not through its producer,
	// not by direct gets of events or of the approvals bucket.
	gxP := tenantProducer(t, gx)
	_, err = gxP.Approval(ctx, id)
	require.ErrorIs(t, err, producer.ErrNoApproval)
	for _, rq := range []struct{ subject, body string }{
		{"$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.events.*." + id, ""},
		{"$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.t.ACME.events.*." + id, ""},
		{"$JS.API.DIRECT.GET.KV_toolq_approvals.$KV.toolq_approvals.ACME." + id, ""},
		{"$JS.API.DIRECT.GET.KV_toolq_approvals.$KV.toolq_approvals.>", ""},
		{"$JS.API.STREAM.MSG.GET.KV_toolq_approvals", `{"last_by_subj":"$KV.toolq_approvals.ACME.` + id + `"}`},
	} {
		resp, err := gx.Request(rq.subject, []byte(rq.body), 500*time.Millisecond)
		refused(t, rq.subject, resp, err)
	}
	// It cannot decide it: it knows the id and (worst case) the hash, and
	// signs for ACME or for itself; the decision lands on GLOBEX's subject.
	for _, tenant := range []string{"ACME", "GLOBEX"} {
		d := shell.NewDecision(&shell.Approval{ID: id, Tenant: tenant, Hash: pending.Hash}, shell.Approve, false, "", time.Now())
		seed, err := b.globexApprover.Seed()
		require.NoError(t, err)
		d, err = shell.SignDecision(d, seed)
		require.NoError(t, err)
		dj, err := gxP.Decide(ctx, &d, nil)
		require.NoError(t, err)
		dev, err := gxP.Await(ctx, dj.Session, dj.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusFailed, dev.Data.Status, "GLOBEX's decision signed for %s", tenant)
	}
	// Nor publish into ACME's subspace, nor submit other jobs.
	gjs, err := jetstream.New(gx)
	require.NoError(t, err)
	for _, subject := range []string{"toolq.t.ACME.jobs.exec.decide", "toolq.jobs.exec", "toolq.jobs.noop"} {
		_, err = gjs.Publish(short(t), subject, []byte(`{}`))
		require.Error(t, err, subject)
	}
	// ACME's agent may not decide: only its approver role may.
	ajs, err := jetstream.New(b.acme)
	require.NoError(t, err)
	_, err = ajs.Publish(short(t), "toolq.jobs.exec.decide", []byte(`{}`))
	require.Error(t, err)
	// GLOBEX's approver with the CLI: the approval is unknown to it.
	out, err := exec.CommandContext(ctx, toolq(t), "--nats", b.srv.URL(), "--nkey-seed", b.approverSeeds["GLOBEX"], "--tenant-account",
		"approve", id, "--seed-file", b.approverSeeds["GLOBEX"], "--yes").CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), "unknown or expired")
	require.NotContains(t, string(out), secret)
	last, err := b.acmeP.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
	require.NoError(t, err)
	require.Equal(t, contracts.StatusApprovalPending, last.Data.Status, "an attack moved ACME's approval")

	// ACME's approver with the CLI, under ACME's credentials: the plan is
	// shown from ACME's own event, signed, and the command runs.
	cmd := exec.CommandContext(ctx, toolq(t), "--nats", b.srv.URL(), "--nkey-seed", b.approverSeeds["ACME"], "--tenant-account",
		"approve", id, "--seed-file", b.approverSeeds["ACME"], "--expect-hash", pending.Hash, "--wait")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "stdout %s\nstderr %s", stdout.String(), stderr.String())
	require.Contains(t, stderr.String(), "tenant:   ACME")
	require.Contains(t, stderr.String(), "DB_PASSWORD")
	end, err := b.acmeP.Await(ctx, job.Session, job.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, end.Data.Status, "%v", end.Data.Error)
	res, _, err := producer.ExecResult(end)
	require.NoError(t, err)
	require.Equal(t, "1\n2\n", res.Stdout)

	// Nothing the attacker's approver heard carries ACME's secret.
	require.NotZero(t, drainHeard(t, subs, secret), "the attacker's approver hears its own decisions' events")
}
