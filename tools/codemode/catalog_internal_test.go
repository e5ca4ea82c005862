package codemode

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
)

// The catalog keeps tenants apart: workers' tools are everyone's, a
// client tool is its tenant's own, a tenant cannot put a bus tool in the
// catalog, and one tenant's flood stops at MaxClientTools without touching
// anyone else's entries.
func TestCatalogKeepsTenantsApart(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	js := testutil.JetStream(t, srv.Connect(t))
	ctx := testutil.Context(t, 30*time.Second)
	require.NoError(t, bus.Ensure(ctx, js, bus.Config{}))
	kv, err := js.KeyValue(ctx, contracts.Subjects{}.CatalogBucket())
	require.NoError(t, err)

	put := func(key string, entry contracts.CatalogTool) {
		t.Helper()
		data, err := json.Marshal(entry)
		require.NoError(t, err)
		_, err = kv.Put(ctx, key, data)
		require.NoError(t, err)
	}
	noop := contracts.CatalogTool{ID: "toolq:core:noop", Tool: "noop", Name: "noop", Source: contracts.SourceToolq}
	put(contracts.CatalogKey(noop.ID), noop)
	mine := func(name string) contracts.CatalogTool {
		return contracts.CatalogTool{ID: "client:app:" + name, Name: name, Source: contracts.SourceClient}
	}
	put(contracts.TenantCatalogKey("", "client:app:lookup"), mine("lookup"))
	put(contracts.TenantCatalogKey("ACME", "client:app:lookup"), mine("lookup"))
	put(contracts.TenantCatalogKey("ACME", "client:app:acme_only"), mine("acme_only"))
	// A tenant dressing a bus tool as its own entry: refused.
	evil := contracts.CatalogTool{ID: "toolq:core:evil", Tool: "noop", Name: "evil", Source: contracts.SourceToolq}
	put(contracts.TenantCatalogKey("GLOBEX", evil.ID), evil)
	// An entry under another entry's key: refused.
	put(contracts.TenantCatalogKey("GLOBEX", "client:app:x"), mine("y"))
	// GLOBEX floods.
	for i := range MaxClientTools + 10 {
		put(contracts.TenantCatalogKey("GLOBEX", fmt.Sprintf("client:flood:t%03d", i)), contracts.CatalogTool{
			ID: fmt.Sprintf("client:flood:t%03d", i), Name: "flood", Source: contracts.SourceClient,
		})
	}
	last := contracts.TenantCatalogKey("ACME", "client:app:after_flood")
	put(last, mine("after_flood"))

	c := &catalog{entries: map[string]catalogEntry{}, clients: map[string]int{}, log: slog.New(slog.DiscardHandler)}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	require.NoError(t, c.watch(wctx, kv, func() { close(done) }))
	t.Cleanup(func() { stop(); <-done })

	ids := func(tenant string) []string {
		var out []string
		for _, tool := range c.forRun(tenant, nil, nil, nil, false).tools {
			out = append(out, tool.ID)
		}
		return out
	}
	require.Eventually(t, func() bool {
		c.mu.RLock()
		defer c.mu.RUnlock()
		_, ok := c.entries[last]
		return ok
	}, 10*time.Second, 10*time.Millisecond)

	require.Equal(t, []string{"client:app:lookup", "toolq:core:noop"}, ids(""), "the default tenant: its own client tool and the workers'")
	require.Equal(t, []string{"client:app:acme_only", "client:app:after_flood", "client:app:lookup", "toolq:core:noop"}, ids("ACME"))
	globex := ids("GLOBEX")
	require.Len(t, globex, MaxClientTools+1, "GLOBEX's flood stops at the cap; plus the workers' tool")
	require.Contains(t, globex, "toolq:core:noop")
	require.NotContains(t, globex, "toolq:core:evil")
	require.NotContains(t, globex, "client:app:lookup")
	require.NotContains(t, globex, "client:app:y")

	// Deleting frees room; a refused replacement removes the stale entry.
	require.NoError(t, kv.Delete(ctx, contracts.TenantCatalogKey("GLOBEX", "client:flood:t000")))
	put(contracts.TenantCatalogKey("ACME", "client:app:lookup"), evil)
	require.Eventually(t, func() bool {
		return len(ids("GLOBEX")) == MaxClientTools && len(ids("ACME")) == 3
	}, 10*time.Second, 10*time.Millisecond)
	_, ok := c.lookup("ACME", "client:app:lookup")
	require.False(t, ok)
	got, ok := c.lookup("ACME", "client:app:acme_only")
	require.True(t, ok)
	require.Equal(t, "acme_only", got.Name)
	_, ok = c.lookup("", "client:app:acme_only")
	require.False(t, ok, "the default tenant does not see ACME's client tool")
}

// TestCatalogWaitApplied: a wait for a registration's sequence returns as
// soon as the mirror applied it, and gives up after its bound for one the
// bucket never reaches.
func TestCatalogWaitApplied(t *testing.T) {
	t.Parallel()
	c, kv, ctx := watchedCatalog(t)

	waited := make(chan bool, 1)
	tool := contracts.CatalogTool{ID: "client:app:pick", Name: "pick", Description: "Pick.", Source: contracts.SourceClient}
	data, err := json.Marshal(tool)
	require.NoError(t, err)
	seq, err := kv.Put(ctx, contracts.CatalogKey(tool.ID), data)
	require.NoError(t, err)
	go func() { waited <- c.waitApplied(ctx, seq, 10*time.Second) }()
	require.True(t, <-waited, "the mirror reaches the registration")
	_, ok := c.lookup("", tool.ID)
	require.True(t, ok, "and holds the tool")
	start := time.Now()
	require.False(t, c.waitApplied(ctx, seq+1000, 200*time.Millisecond), "a sequence never written")
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
}

// TestCatalogRefusesUncompilableOutputSchema: an entry whose declared
// output schema does not compile is kept out of the catalog (no run can
// call it), one with a valid schema is in it, and a valid entry replaced
// by an invalid one is gone.
func TestCatalogRefusesUncompilableOutputSchema(t *testing.T) {
	t.Parallel()
	c, kv, ctx := watchedCatalog(t)
	put := func(id, schema string) {
		t.Helper()
		data, err := json.Marshal(contracts.CatalogTool{ID: id, Name: "t", Description: "T.", Source: contracts.SourceClient, OutputSchema: json.RawMessage(schema)})
		require.NoError(t, err)
		seq, err := kv.Put(ctx, contracts.CatalogKey(id), data)
		require.NoError(t, err)
		require.True(t, c.waitApplied(ctx, seq, 10*time.Second))
	}
	put("client:app:good", `{"type":"object","properties":{"n":{"type":"integer"}}}`)
	put("client:app:bad", `{"type":"nope"}`)
	_, ok := c.lookup("", "client:app:good")
	require.True(t, ok)
	_, ok = c.lookup("", "client:app:bad")
	require.False(t, ok, "an output schema that does not compile keeps the tool out")
	put("client:app:good", `{"minimum":"ten"}`)
	_, ok = c.lookup("", "client:app:good")
	require.False(t, ok, "replaced by an invalid entry: gone")
}

// watchedCatalog is a catalog mirror watching the catalog bucket of a
// server of its own; the watch ends with the test.
func watchedCatalog(t *testing.T) (*catalog, jetstream.KeyValue, context.Context) {
	t.Helper()
	srv := testutil.StartJetStream(t)
	js := testutil.JetStream(t, srv.Connect(t))
	ctx := testutil.Context(t, 30*time.Second)
	require.NoError(t, bus.Ensure(ctx, js, bus.Config{}))
	kv, err := js.KeyValue(ctx, contracts.Subjects{}.CatalogBucket())
	require.NoError(t, err)
	c := &catalog{entries: map[string]catalogEntry{}, clients: map[string]int{}, log: slog.New(slog.DiscardHandler)}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	require.NoError(t, c.watch(wctx, kv, func() { close(done) }))
	t.Cleanup(func() { cancel(); <-done })
	return c, kv, ctx
}
