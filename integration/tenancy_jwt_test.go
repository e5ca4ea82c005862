package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/tenantjwt"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

// jwtBus is a real nats-server in operator mode with the operator, the
// accounts and the users that tenantjwt made.
type jwtBus struct {
	*tenancy
	cfg            *tenantjwt.Config
	sys            *nats.Conn // a user of the system account
	acmeT, globexT *tenantjwt.Tenant
}

func (j *jwtBus) connect(t *testing.T, o ...nats.Option) *nats.Conn {
	t.Helper()
	o = append(o, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	nc, err := nats.Connect(j.srv.URL(), o...)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func (j *jwtBus) creds(name string) nats.Option {
	return nats.UserCredentials(filepath.Join(j.cfg.Dir, "creds", name))
}

// setupJWTTenancy makes the operator, toolq's accounts and two tenants
// with tenantjwt: ACME before the server starts (found in the resolver's
// store), GLOBEX while it runs (pushed to its resolver). A worker of the
// toolq account serves both, registered under their account keys.
func setupJWTTenancy(t *testing.T) *jwtBus {
	t.Helper()
	dir := t.TempDir()
	j := &jwtBus{
		tenancy: &tenancy{holds: make(chan string, 16), releases: map[string]chan struct{}{}},
		cfg:     &tenantjwt.Config{Dir: filepath.Join(dir, "operator")},
	}
	setup, err := tenantjwt.Init(j.cfg)
	require.NoError(t, err)
	j.acmeT, err = tenantjwt.AddTenant(j.cfg, "ACME", nil)
	require.NoError(t, err)
	j.srv = testutil.StartServerProcess(t, filepath.Join(dir, "js"), "-c", setup.ServerConf)

	j.wnc = j.connect(t, j.creds("worker.creds"))
	j.sched = j.connect(t, j.creds("scheduler.creds"))
	j.sys = j.connect(t, j.creds("sys.creds"))
	j.wjs, err = jetstream.New(j.wnc)
	require.NoError(t, err)
	ctx := testutil.Context(t, 30*time.Second)
	j.globexT, err = tenantjwt.AddTenant(j.cfg, "GLOBEX", nil)
	require.NoError(t, err)
	require.NoError(t, tenantjwt.Push(ctx, j.sys, contracts.Subjects{}, j.globexT.JWT))

	// The tenant ids are the account keys: register them as such.
	for _, tn := range []*tenantjwt.Tenant{j.acmeT, j.globexT} {
		require.NoError(t, bus.AddTenant(ctx, j.wjs, bus.Config{TenantQueueLimit: tenantQueueLimit}, contracts.TenantRecord{Name: tn.Account}))
	}
	w, err := worker.New(j.wnc, &worker.Config{
		Name: "w1", Builtins: true, Tenants: true, TenantQueueLimit: tenantQueueLimit,
		Logger: slog.New(slog.DiscardHandler), StopTimeout: 5 * time.Second,
	})
	require.NoError(t, err)
	require.NoError(t, w.Register("hold", worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
		j.holds <- job.ID
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-j.release(job.ID):
			return json.RawMessage(`"released"`), nil
		}
	}), nil))
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})

	j.acme = j.connect(t, nats.UserCredentials(j.acmeT.Creds))
	j.globex = j.connect(t, nats.UserCredentials(j.globexT.Creds))
	j.acmeP = tenantProducer(t, j.acme)
	j.globexP = tenantProducer(t, j.globex)
	return j
}

// accountImports is what the server says account pub imports, by the
// system account's INFO request.
func (j *jwtBus) accountImports(t *testing.T, pub string) []jwt.Import {
	t.Helper()
	resp, err := j.sys.Request("$SYS.REQ.ACCOUNT."+pub+".INFO", nil, 5*time.Second)
	require.NoError(t, err)
	var info struct {
		Data struct {
			Imports []jwt.Import `json:"imports"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(resp.Data, &info), string(resp.Data))
	return info.Data.Imports
}

// ownImports is the subjects of the toolq account that tenant pub imports.
func ownImports(pub string) []string {
	var out []string
	for _, im := range tenantjwt.TenantAccount(contracts.Subjects{}, "X", pub).Imports {
		out = append(out, string(im.Subject))
	}
	return out
}

// fromAccount is the imports of ims from account acct.
func fromAccount(ims []jwt.Import, acct string) []string {
	var out []string
	for _, im := range ims {
		if im.Account == acct {
			out = append(out, string(im.Subject))
		}
	}
	return out
}

// TestTenancyJWT runs the isolation checks of TestTenancy on a server in
// operator mode, with accounts made by tenantjwt (toolq tenant jwt).
//
//nolint:paralleltest // the subtests share one server and run in order
func TestTenancyJWT(t *testing.T) {
	j := setupJWTTenancy(t)
	s := contracts.Subjects{}
	acme, globex := j.acmeT.Account, j.globexT.Account

	t.Run("the tenant id is the account key", func(t *testing.T) {
		for _, tn := range []*tenantjwt.Tenant{j.acmeT, j.globexT} {
			require.True(t, nkeys.IsValidPublicAccountKey(tn.Account))
			require.True(t, contracts.ValidID(tn.Account))
		}
	})

	t.Run("a tenant works end to end", func(t *testing.T) {
		j.victimJob(t, "acme-own")
		ctx := testutil.Context(t, 20*time.Second)
		job, err := j.globexP.Submit(ctx, worker.ToolNoop, json.RawMessage(`{"mine":true}`), nil)
		require.NoError(t, err)
		ev, err := j.globexP.Await(ctx, job.Session, job.ID, nil)
		require.NoError(t, err)
		require.JSONEq(t, `{"mine":true}`, string(ev.Data.Result))
		for _, tenant := range []string{acme, globex} {
			st, err := j.wjs.Stream(ctx, s.TenantJobsStream(tenant))
			require.NoError(t, err)
			require.Equal(t, []string{"toolq.t." + tenant + ".jobs.>"}, st.CachedInfo().Config.Subjects)
		}
	})

	t.Run("a tenant reads none of another's events", func(t *testing.T) {
		var subs []*nats.Subscription
		for _, subject := range []string{"toolq.events.>", "toolq.t.>", ">", "$JS.>", "_INBOX.>"} {
			sub, err := j.globex.SubscribeSync(subject)
			require.NoError(t, err)
			subs = append(subs, sub)
		}
		require.NoError(t, j.globex.Flush())
		victim := j.victimJob(t, "acme-read")
		ctx := testutil.Context(t, 20*time.Second)
		own, err := j.globexP.Submit(ctx, worker.ToolNoop, nil, nil)
		require.NoError(t, err)
		_, err = j.globexP.Await(ctx, own.Session, own.ID, nil)
		require.NoError(t, err)
		require.NotZero(t, drainHeard(t, subs, secret, victim.ID), "the attacker hears its own events")

		for _, rq := range []struct{ subject, body string }{
			{"$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.events.s1." + victim.ID, ""},
			{"$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.events.>", ""},
			{"$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.t." + acme + ".events.s1." + victim.ID, ""},
			{"$JS.API.DIRECT.GET.TOOLQ_EVENTS", `{"last_by_subj":"toolq.t.` + acme + `.events.s1.` + victim.ID + `"}`},
			{"$JS.API.STREAM.MSG.GET.TOOLQ_EVENTS", `{"seq":1}`},
			{"$JS.API.CONSUMER.CREATE.TOOLQ_EVENTS", `{"stream_name":"TOOLQ_EVENTS","config":{"deliver_policy":"all","ack_policy":"none"}}`},
		} {
			resp, err := j.globex.Request(rq.subject, []byte(rq.body), 500*time.Millisecond)
			refused(t, rq.subject, resp, err, victim.ID)
		}
		// The attacker's own direct get stays in its own subspace.
		resp, err := j.globex.Request("$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.events.>", nil, time.Second)
		require.NoError(t, err)
		require.Contains(t, resp.Header.Get("Nats-Subject"), "toolq.t."+globex+".events.")
		_, err = j.globexP.Await(short(t), victim.Session, victim.ID, nil)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})

	t.Run("a tenant replays its own events, never another's", func(t *testing.T) {
		// The replay export's streamed response and the worker's
		// response permission, as JWT claims.
		victim := j.victimJob(t, "acme-replay")
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
		mine := collect(j.acmeP, &producer.ReadOpts{JobID: victim.ID})
		require.Len(t, mine, 1)
		require.Contains(t, string(mine[0].Data.Result), secret)
		require.Empty(t, collect(j.globexP, &producer.ReadOpts{JobID: victim.ID}))
		for _, ev := range collect(j.globexP, nil) {
			require.NotEqual(t, victim.ID, ev.Data.JobID)
		}
	})

	t.Run("a tenant cannot cancel another's job", func(t *testing.T) {
		ctx := testutil.Context(t, 30*time.Second)
		victim, err := j.acmeP.Submit(ctx, "hold", nil, &producer.SubmitOpts{ID: "acme-hold"})
		require.NoError(t, err)
		require.Equal(t, "acme-hold", <-j.holds)
		require.NoError(t, j.globexP.Cancel(ctx, victim.Session, victim.ID))
		require.NoError(t, j.globex.Flush())
		// The victim's own cancel of another job ends it: the worker has
		// heard the attacker's cancel before.
		own, err := j.acmeP.Submit(ctx, "hold", nil, &producer.SubmitOpts{ID: "acme-own-hold"})
		require.NoError(t, err)
		require.Equal(t, "acme-own-hold", <-j.holds)
		require.NoError(t, j.acmeP.Cancel(ctx, own.Session, own.ID))
		ev, err := j.acmeP.Await(ctx, own.Session, own.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCancelled, ev.Data.Status)
		close(j.release(victim.ID))
		ev, err = j.acmeP.Await(ctx, victim.Session, victim.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	})

	t.Run("a tenant added while the server runs needs no push", func(t *testing.T) {
		// The full resolver reads an account it does not know from its
		// store when the account's first user connects.
		late, err := tenantjwt.AddTenant(j.cfg, "LATE", nil)
		require.NoError(t, err)
		j.connect(t, nats.UserCredentials(late.Creds))
		toolq, err := tenantjwt.ToolqAccount(j.cfg)
		require.NoError(t, err)
		require.ElementsMatch(t, ownImports(late.Account), fromAccount(j.accountImports(t, late.Account), toolq))
	})

	t.Run("an account that imports another tenant's subspace gets none of it", func(t *testing.T) {
		toolq, err := tenantjwt.ToolqAccount(j.cfg)
		require.NoError(t, err)
		// The server holds ACME's imports, every one from the toolq account.
		require.ElementsMatch(t, ownImports(acme), fromAccount(j.accountImports(t, acme), toolq))

		// EVIL's account, signed by the operator (an operator's mistake,
		// or a stolen signing key), imports ACME's subspace.
		kp, err := nkeys.CreateAccount()
		require.NoError(t, err)
		evil, err := kp.PublicKey()
		require.NoError(t, err)
		ac := tenantjwt.TenantAccount(s, "EVIL", evil)
		for _, im := range ac.Imports {
			im.Subject = jwt.Subject(strings.ReplaceAll(string(im.Subject), evil, acme))
		}
		// tenantjwt signs and pushes no such account.
		_, err = tenantjwt.SignAccount(j.cfg, ac)
		require.ErrorIs(t, err, contracts.ErrInvalidInput)
		for _, im := range ac.Imports {
			im.Account = toolq
		}
		seed, err := os.ReadFile(filepath.Join(j.cfg.Dir, "keys", "operator-signing.nk"))
		require.NoError(t, err)
		signer, err := nkeys.FromSeed(bytes.TrimSpace(seed))
		require.NoError(t, err)
		theJWT, err := ac.Encode(signer)
		require.NoError(t, err)
		ctx := testutil.Context(t, 20*time.Second)
		require.ErrorIs(t, tenantjwt.Push(ctx, j.sys, s, theJWT), contracts.ErrInvalidInput)
		// The server itself stores the claim ("jwt updated"): it checks an
		// import's authorization only when it applies the claim, and then
		// drops the import with a debug line ("service import not
		// authorized"), not an error.
		resp, err := j.sys.Request("$SYS.REQ.CLAIMS.UPDATE", []byte(theJWT), 5*time.Second)
		require.NoError(t, err)
		require.Contains(t, string(resp.Data), `"code":200`)
		ukp, err := nkeys.CreateUser()
		require.NoError(t, err)
		upub, err := ukp.PublicKey()
		require.NoError(t, err)
		uc := jwt.NewUserClaims(upub)
		ujwt, err := uc.Encode(kp)
		require.NoError(t, err)
		enc := j.connect(t, nats.UserJWT(func() (string, error) { return ujwt, nil }, func(nonce []byte) ([]byte, error) { return ukp.Sign(nonce) }))

		// The server dropped every import of EVIL's claim.
		require.Empty(t, fromAccount(j.accountImports(t, evil), toolq))
		sub, err := enc.SubscribeSync(">")
		require.NoError(t, err)
		require.NoError(t, enc.Flush())
		victim := j.victimJob(t, "acme-evil")
		_, err = sub.NextMsg(300 * time.Millisecond)
		require.ErrorIs(t, err, nats.ErrTimeout, "EVIL heard ACME")
		require.NoError(t, sub.Unsubscribe()) // or it would answer the requests below
		_, err = enc.Request("toolq.jobs.noop", []byte(`{}`), 500*time.Millisecond)
		require.ErrorIs(t, err, nats.ErrNoResponders, "EVIL reached ACME's jobs")
		resp, err = enc.Request("$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.events.s1."+victim.ID, nil, 500*time.Millisecond)
		refused(t, "EVIL's direct get", resp, err, victim.ID)
	})
}
