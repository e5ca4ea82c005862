package codemode_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/worker"
)

const catalogTTL = time.Second

// startBeatWorker starts a worker (no code mode) serving tool, whose
// catalog entry lives catalogTTL after its last refresh. kill closes its
// connection without a Stop, as a crashed process would leave it.
func (b *bundle) startBeatWorker(t *testing.T, name, tool string) (w *worker.Worker, kill func()) {
	t.Helper()
	nc := b.srv.Connect(t)
	w, err := worker.New(nc, &worker.Config{Name: name, Logger: quiet, StopTimeout: time.Second, CatalogTTL: catalogTTL})
	require.NoError(t, err)
	require.NoError(t, w.Register(tool, worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
		return json.RawMessage(`"beat"`), nil
	}), &worker.ToolConfig{Catalog: &contracts.CatalogTool{Description: "Answers beat."}}))
	require.NoError(t, w.Start(testutil.Context(t, 20*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx) // a killed worker's Stop may fail: its connection is gone
	})
	return w, nc.Close
}

// sees runs code that reports which of ids the run's catalog holds.
func (b *bundle) sees(t *testing.T, ids ...string) map[string]bool {
	t.Helper()
	job := b.exec(t, `const ids = new Set(ALL_TOOLS.map((t) => t.id)); return Object.fromEntries(`+string(mustJSON(t, ids))+`.map((id) => [id, ids.has(id)]));`, nil, nil)
	ev := b.await(t, job, false)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	var seen map[string]bool
	require.NoError(t, json.Unmarshal(result(t, ev.Data.Result).Value, &seen))
	return seen
}

// TestCatalogEntriesExpire: a worker's catalog entry stays while any
// worker serving the tool refreshes it — past its TTL after one of two
// workers stopped — and leaves the catalog a run sees once the last one
// is gone: stopped, or killed without a Stop. A client tool lives for its own
// TTL (registering it again would renew it); one without a TTL stays.
func TestCatalogEntriesExpire(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, "cm", nil, nil)
	a, _ := b.startBeatWorker(t, "A", "beat")
	_, killB := b.startBeatWorker(t, "B", "beat")
	alone, _ := b.startBeatWorker(t, "C", "solo")
	ctx := testutil.Context(t, 60*time.Second)
	require.NoError(t, b.prod.RegisterClientTool(ctx, contracts.CatalogTool{ID: "client:app:brief", Name: "brief", Description: "Short-lived.", TTLSeconds: 1}))
	require.NoError(t, b.prod.RegisterClientTool(ctx, contracts.CatalogTool{ID: "client:app:lasting", Name: "lasting", Description: "Default TTL."}))
	const beat, solo = "toolq:core:beat", "toolq:core:solo"
	registered := time.Now()

	require.Equal(t, map[string]bool{beat: true, solo: true, "client:app:lasting": true},
		pick(b.sees(t, beat, solo, "client:app:lasting"), beat, solo, "client:app:lasting"))

	// A stops; B still serves beat: it stays for three TTLs and more. C,
	// the only worker of solo, stops too: solo leaves.
	require.NoError(t, a.Stop(ctx))
	require.NoError(t, alone.Stop(ctx))
	stopped := time.Now()
	for time.Since(stopped) < 3*catalogTTL {
		require.True(t, b.sees(t, beat)[beat], "beat left the catalog while B serves it")
		require.NoError(t, ctx.Err())
		time.Sleep(100 * time.Millisecond) // polling the catalog through runs
	}
	// The short-lived client tool and solo are gone by now; the other
	// client tool stays.
	require.Greater(t, time.Since(registered), 2*time.Second)
	seen := b.sees(t, "client:app:brief", "client:app:lasting", solo)
	require.False(t, seen["client:app:brief"], "a client tool outlived its TTL")
	require.False(t, seen[solo], "solo outlived its only worker's Stop by three TTLs")
	require.True(t, seen["client:app:lasting"])

	// B dies without a word: beat leaves within its TTL (and a little).
	killB()
	killed := time.Now()
	for b.sees(t, beat)[beat] {
		require.NoError(t, ctx.Err(), "beat is still in the catalog %s after its last worker died", time.Since(killed))
		time.Sleep(100 * time.Millisecond) // polling the catalog through runs
	}
	gone := time.Since(killed)
	t.Logf("beat left the catalog %s after its last worker was killed (TTL %s)", gone, catalogTTL)
	require.Less(t, gone, catalogTTL+2*time.Second)
	require.True(t, b.sees(t, "toolq:core:noop")["toolq:core:noop"], "the code-mode worker's own tools stay")

	// A call by the id is refused like any tool not in the run's catalog.
	job := b.exec(t, `try { await tools.callValue("toolq:core:beat", {}); return "called"; } catch (e) { return e.message; }`, nil, nil)
	ev := b.await(t, job, false)
	require.Contains(t, string(result(t, ev.Data.Result).Value), "not in this run's catalog")
}

func pick(m map[string]bool, keys ...string) map[string]bool {
	out := map[string]bool{}
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}

// TestTenantClientToolsExpireApart: two tenants register a client tool of
// the same id, ACME's with a TTL of a second, GLOBEX's with none: ACME's
// runs lose it after the second, GLOBEX's keep theirs, and neither ever
// sees the other's.
func TestTenantClientToolsExpireApart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testutil.Context(t, 60*time.Second)
	js := testutil.JetStream(t, b.srv.Connect(t))
	for _, name := range []string{"ACME", "GLOBEX"} {
		require.NoError(t, bus.AddTenant(ctx, js, bus.Config{}, contracts.TenantRecord{Name: name}))
	}
	b.startWorkerWith(t, &worker.Config{Name: "A", Tenants: true}, nil, nil)
	kv, err := js.KeyValue(ctx, contracts.Subjects{}.CatalogBucket())
	require.NoError(t, err)
	for tenant, ttl := range map[string]int{"ACME": 1, "GLOBEX": 0} {
		entry := contracts.CatalogTool{ID: "client:app:lookup", Name: "lookup", Description: tenant + "'s", Source: contracts.SourceClient, TTLSeconds: ttl}
		// As the tenant's import files it.
		_, err := kv.Put(ctx, contracts.TenantCatalogKey(tenant, entry.ID), mustJSON(t, entry))
		require.NoError(t, err)
	}
	written := time.Now()
	n := 0
	lookup := func(tenant string) string {
		t.Helper()
		n++
		id := fmt.Sprintf("%s-%d", tenant, n)
		b.tenantJob(t, tenant, codeJob(id, contracts.ToolCodeModeExec, "s1", map[string]any{
			"code": `const e = ALL_TOOLS.find((t) => t.id === "client:app:lookup"); return e ? e.description : "none";`,
		}))
		ev := b.tenantEvent(t, tenant, "s1", id, terminal)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
		var v string
		require.NoError(t, json.Unmarshal(result(t, ev.Data.Result).Value, &v))
		return v
	}
	// The mirror may not have both entries the first moment.
	for lookup("GLOBEX") != "GLOBEX's" {
		require.NoError(t, ctx.Err())
		time.Sleep(50 * time.Millisecond) // polling the catalog through runs
	}
	if time.Since(written) < 900*time.Millisecond {
		require.Equal(t, "ACME's", lookup("ACME"))
	}
	for lookup("ACME") != "none" {
		require.NoError(t, ctx.Err(), "ACME's client tool outlived its TTL")
		time.Sleep(100 * time.Millisecond) // polling the catalog through runs
	}
	require.GreaterOrEqual(t, time.Since(written), time.Second)
	require.Equal(t, "GLOBEX's", lookup("GLOBEX"), "ACME's expiry took GLOBEX's entry")
	require.Equal(t, "none", lookup("ACME"))
}
