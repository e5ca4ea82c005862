package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/scheduler"
	"github.com/toolq/toolq/worker"
)

// The example keys of deploy/nats/tenants.conf, replaced by fresh ones.
const (
	acmeExampleKey     = "UBDZLVZYZHAIEZVKPZKHLGERGHHQXP52JLOHIDJO5QH3GW3LR54BK3QZ"
	globexExampleKey   = "UBOZUWEMU5RQ35PIJTIG2BF46KEIRK2RGKBZBVFWIRGHNB4S7RYQY2WI"
	approverExampleKey = "UB67T6C5ATSMBT4ZJ7AELG52PIQ2DUFW54YI6CPMPCCKGBAR6CWGXM3Z"
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
	holds        chan string        // job ids of hold jobs as they start

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

func setupTenancy(t *testing.T) *tenancy {
	t.Helper()
	conf, err := os.ReadFile(filepath.Join("..", "deploy", "nats", "tenants.conf"))
	require.NoError(t, err)
	acmeKP, acmePub := userKey(t)
	globexKP, globexPub := userKey(t)
	_, approverPub := userKey(t)
	for _, k := range []string{acmeExampleKey, globexExampleKey, approverExampleKey} {
		require.Contains(t, string(conf), k, "the example key moved: update this test")
	}
	text := strings.NewReplacer(
		"$TOOLQ_WORKER_PASSWORD", `"worker-secret"`, "$TOOLQ_SCHEDULER_PASSWORD", `"scheduler-secret"`,
		acmeExampleKey, acmePub, globexExampleKey, globexPub, approverExampleKey, approverPub,
	).Replace(string(conf))
	// One addition, a user of the toolq account with every permission: it
	// stands in for the server when a test needs a real advisory.
	require.Contains(t, text, `{ user = "worker",`)
	text = strings.Replace(text, `{ user = "worker",`, `{ user = "control", password = "control-secret" }
      { user = "worker",`, 1)
	dir := t.TempDir()
	path := filepath.Join(dir, "tenants.conf")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600)) //nolint:gosec // G703: a fixed name in the test's temp dir
	b := &tenancy{holds: make(chan string, 16), releases: map[string]chan struct{}{}}
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
	// The operator registers both tenants (`toolq tenant add` does this).
	for _, name := range []string{"ACME", "GLOBEX"} {
		require.NoError(t, bus.AddTenant(testutil.Context(t, 10*time.Second), b.wjs, bus.Config{TenantQueueLimit: tenantQueueLimit}, contracts.TenantRecord{Name: name}))
	}
	quietLog := slog.New(slog.DiscardHandler)
	w, err := worker.New(b.wnc, &worker.Config{Name: "w1", Builtins: true, Tenants: true, TenantQueueLimit: tenantQueueLimit, Logger: quietLog, StopTimeout: 5 * time.Second})
	require.NoError(t, err)
	// hold runs until its job is cancelled or released.
	require.NoError(t, w.Register("hold", worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
		b.holds <- job.ID
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-b.release(job.ID):
			return json.RawMessage(`"released"`), nil
		}
	}), nil))
	ctx := testutil.Context(t, 30*time.Second)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})

	b.acme = connect(nats.Nkey(acmePub, acmeKP.Sign))
	b.globex = connect(nats.Nkey(globexPub, globexKP.Sign))
	// Both tenants use the same session name: sessions are not the wall.
	b.acmeP = tenantProducer(t, b.acme)
	b.globexP = tenantProducer(t, b.globex)
	return b
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
		heard := 0
		for _, sub := range subs {
			for {
				m, err := sub.NextMsg(100 * time.Millisecond)
				if err != nil {
					break
				}
				heard++
				require.NotContains(t, string(m.Data), secret, "on %s", m.Subject)
				require.NotContains(t, string(m.Data), victim.ID, "on %s", m.Subject)
			}
		}
		require.NotZero(t, heard, "the attacker hears its own events")

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

	t.Run("KV records and object-store snapshots of another tenant", func(t *testing.T) {
		ctx := testutil.Context(t, 20*time.Second)
		s := contracts.Subjects{}
		runs, err := b.wjs.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: s.RunsBucket()})
		require.NoError(t, err)
		_, err = runs.Put(ctx, "run-acme", []byte(`{"tenant":"ACME","env":"`+secret+`"}`))
		require.NoError(t, err)
		snaps, err := b.wjs.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: s.SnapshotsBucket()})
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
		// end the worker would report to the run as its nested result.
		ctx := testutil.Context(t, 20*time.Second)
		job, err := b.globexP.Submit(ctx, worker.ToolNoop, json.RawMessage(`"pwned"`), &producer.SubmitOpts{
			Parent: &contracts.Parent{RunID: "acme-run", CallID: "c1", Tool: contracts.ToolCodeModeResult},
		})
		require.NoError(t, err)
		ev, err := b.globexP.Await(ctx, job.Session, job.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusFailed, ev.Data.Status)
		require.Equal(t, contracts.CodeInvalidInput, ev.Data.Error.Code)
		n, err := subjectCount(b, contracts.Subjects{}.JobsStream(), contracts.Subjects{}.Job(contracts.ToolCodeModeResult))
		require.NoError(t, err)
		require.Zero(t, n, "a nested result reached the toolq account's jobs")
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
