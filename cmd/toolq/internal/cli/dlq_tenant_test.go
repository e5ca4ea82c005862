package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/cmd/toolq/internal/operator"
	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/worker"
)

// tenantBus is an in-process server running the shipped tenants.conf
// (ACME's and GLOBEX's agents with fresh keys), a worker in the toolq
// account serving both tenants the flaky tools, and the seed files of the
// two tenants' agents.
type tenantBus struct {
	url      string // no credentials
	operator string // the worker user of the toolq account
	seeds    map[string]string
	flaky    *flaky
}

func startTenantBus(t *testing.T) *tenantBus {
	t.Helper()
	conf, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "deploy", "nats", "tenants.conf"))
	require.NoError(t, err)
	dir := t.TempDir()
	b := &tenantBus{seeds: map[string]string{}, flaky: newFlaky()}
	repl := []string{"$TOOLQ_WORKER_PASSWORD", `"worker-secret"`, "$TOOLQ_SCHEDULER_PASSWORD", `"scheduler-secret"`}
	for name, example := range map[string]string{
		"ACME": "UBDZLVZYZHAIEZVKPZKHLGERGHHQXP52JLOHIDJO5QH3GW3LR54BK3QZ", "GLOBEX": "UBOZUWEMU5RQ35PIJTIG2BF46KEIRK2RGKBZBVFWIRGHNB4S7RYQY2WI",
	} {
		require.Contains(t, string(conf), example, "the example key of %s moved: update this test", name)
		kp, err := nkeys.CreateUser()
		require.NoError(t, err)
		pub, err := kp.PublicKey()
		require.NoError(t, err)
		seed, err := kp.Seed()
		require.NoError(t, err)
		b.seeds[name] = filepath.Join(dir, name+".nk")
		require.NoError(t, os.WriteFile(b.seeds[name], seed, 0o600))
		repl = append(repl, example, pub)
	}
	path := filepath.Join(dir, "tenants.conf")
	require.NoError(t, os.WriteFile(path, []byte(strings.NewReplacer(repl...).Replace(string(conf))), 0o600)) //nolint:gosec // G703: a fixed name in the test's temp dir
	opts, err := server.ProcessConfigFile(path)
	require.NoError(t, err)
	opts.Host, opts.Port, opts.JetStream, opts.StoreDir = "127.0.0.1", -1, true, filepath.Join(dir, "js")
	opts.NoLog, opts.NoSigs = true, true
	ns, err := server.NewServer(opts)
	require.NoError(t, err)
	ns.Start()
	require.True(t, ns.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	b.url = ns.ClientURL()
	b.operator = strings.Replace(b.url, "nats://", "nats://worker:worker-secret@", 1)

	wnc, err := nats.Connect(b.url, nats.UserInfo("worker", "worker-secret"))
	require.NoError(t, err)
	t.Cleanup(wnc.Close)
	js, err := jetstream.New(wnc)
	require.NoError(t, err)
	ctx := testutil.Context(t, 10*time.Second)
	for _, name := range []string{"ACME", "GLOBEX"} {
		require.NoError(t, bus.AddTenant(ctx, js, bus.Config{}, contracts.TenantRecord{Name: name}))
	}
	w, err := worker.New(wnc, &worker.Config{Logger: slog.New(slog.DiscardHandler), Builtins: true, Tenants: true})
	require.NoError(t, err)
	registerFlaky(t, w, b.flaky)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return b
}

// as is the global flags of tenant's agent.
func (b *tenantBus) as(tenant string) []string {
	return []string{"--nkey-seed", b.seeds[tenant], "--tenant-account"}
}

// TestDLQTenants: the operator sees and requeues every tenant's dead
// letters, the requeued job runs in its own tenant (whose agent sees it
// complete; the other tenant sees nothing), and a tenant's agent is
// refused the operator commands with a structured error, whether or not
// it says --tenant-account.
func TestDLQTenants(t *testing.T) {
	t.Parallel()
	b := startTenantBus(t)
	failToDLQ(t, b.url, b.as("ACME"), "flaky", "s", "t1")
	failToDLQ(t, b.url, b.as("GLOBEX"), "flaky", "s", "t1")
	failToDLQ(t, b.operator, nil, "flaky", "s", "t1")

	rows := dlqRows(t, b.operator)
	require.Len(t, rows, 3)
	tenants := map[string]bool{}
	for _, r := range rows {
		require.Equal(t, "t1", r.JobID)
		tenants[r.Tenant] = true
	}
	require.Equal(t, map[string]bool{"ACME": true, "GLOBEX": true, "": true}, tenants)
	acme := dlqRows(t, b.operator, "--tenant", "ACME")
	require.Len(t, acme, 1)

	// One job id, three tenants: show asks for the sequence or a filter.
	code, _, errOut := run(t, "--nats", b.operator, "dlq", "show", "t1")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "names 3 dead letters")
	code, out, errOut := run(t, "--nats", b.operator, "dlq", "show", "t1", "--tenant", "ACME")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^tenant:\s+ACME$`, out)

	// Requeued into ACME's own jobs stream: ACME's agent sees it complete.
	b.flaky.broken.Store(false)
	code, out, errOut = run(t, "--nats", b.operator, "dlq", "requeue", "t1", "--tenant", "ACME")
	require.Equal(t, 0, code, errOut)
	newID := fmt.Sprintf("t1_rq%d", acme[0].Seq)
	require.Contains(t, out, "as "+newID+" on "+contracts.Subjects{}.TenantSessionJob("ACME", &contracts.Job{Tool: "flaky", Session: "s"}), "on the session's lane")
	ev := awaitEvent(t, b.url, b.as("ACME"), "s", newID, contracts.StatusCompleted)
	require.Equal(t, "t1", ev.Data.Meta[operator.MetaRequeuedFrom])
	code, out, errOut = run(t, append(append([]string{"--nats", b.url}, b.as("GLOBEX")...), "events", "--session", "s")...)
	require.Equal(t, 0, code, errOut)
	require.NotContains(t, out, newID, "GLOBEX sees none of ACME's events")
	require.Len(t, dlqRows(t, b.operator), 2)
	require.Empty(t, dlqRows(t, b.operator, "--tenant", "ACME"))

	// The operator's jobs ls covers every tenant's stream.
	qs, _ := jobsLs(t, b.operator, nil, "--tool", "flaky")
	for _, tenant := range []string{"", "ACME", "GLOBEX"} {
		q := queueOf(qs, tenant, "flaky")
		require.NotNil(t, q, "tenant %q: %+v", tenant, qs)
		require.True(t, q.Consumer)
	}

	// A tenant's agent: refused, with or without --tenant-account, and
	// shown nothing.
	for _, extra := range [][]string{b.as("ACME"), {"--nkey-seed", b.seeds["GLOBEX"]}} {
		for _, args := range [][]string{{"dlq", "ls"}, {"dlq", "show", "t1"}, {"dlq", "requeue", "--all"}, {"dlq", "purge", "--all", "--yes"}, {"jobs", "ls"}} {
			full := append(append([]string{"--nats", b.url, "--timeout", "2s", "--json"}, extra...), args...)
			code, out, errOut := run(t, full...)
			require.Equal(t, 2, code, "%v: %s", full, errOut)
			require.Empty(t, out, "%v", full)
			got, msg := requireJSONError(t, errOut)
			require.Equal(t, string(contracts.CodeInvalidInput), got, "%v", full)
			require.Contains(t, msg, "is an operator command", "%v", full)
		}
	}
	require.Len(t, dlqRows(t, b.operator), 2, "the refused purges deleted nothing")
}
