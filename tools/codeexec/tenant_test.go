package codeexec_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/tools/codeexec"
	"github.com/toolq/toolq/worker"
)

// TestKeptToTenants: code_execution configured with "tenants": ["ACME"]
// on a worker that serves named tenants runs ACME's job on the provider,
// leaves GLOBEX's to nobody (it fails runtime_unavailable at the
// queue-time limit, having made no request with the key), and its catalog
// entry names ACME, so only ACME's code-mode runs see it.
func TestKeptToTenants(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	nc := srv.Connect(t)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := testutil.Context(t, 30*time.Second)
	for _, name := range []string{"ACME", "GLOBEX"} {
		require.NoError(t, bus.AddTenant(ctx, js, bus.Config{}, contracts.TenantRecord{Name: name}))
	}
	var hits atomic.Int32
	fake := newFake(t, codeexec.XAI)
	fake.set(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		ok(codeexec.XAI, "Mean: 42.")(w, r)
	})
	w, err := worker.New(srv.Connect(t), &worker.Config{Logger: quiet, Tenants: true, MaxQueueTime: 500 * time.Millisecond})
	require.NoError(t, err)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	_, err = codeexec.Register(w, &codeexec.Config{
		Providers:  map[string]*codeexec.ProviderConfig{codeexec.XAI: {APIKey: keys[codeexec.XAI], BaseURL: fake.srv.URL}},
		Tenants:    []string{"ACME"},
		Getenv:     func(string) string { return "" },
		Logger:     quiet,
		HTTPClient: &http.Client{Transport: tr},
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(sctx))
	})

	s := contracts.Subjects{}
	for _, tenant := range []string{"ACME", "GLOBEX"} {
		body := `{"id":"j1","tool":"code_execution","session":"s1","input":{"task":"mean of 41 and 43"},"created_at":"2026-01-01T00:00:00Z"}`
		_, err := js.Publish(ctx, s.TenantJob(tenant, codeexec.ToolName), []byte(body), jetstream.WithMsgID("j1"))
		require.NoError(t, err)
	}
	events, err := js.Stream(ctx, s.EventsStream())
	require.NoError(t, err)
	terminal := func(tenant string) *contracts.Event {
		for {
			m, err := events.GetLastMsgForSubject(ctx, s.TenantEvent(tenant, "s1", "j1"))
			if err == nil {
				ev, err := contracts.DecodeEvent(m.Data)
				require.NoError(t, err)
				if ev.Data.Status.Terminal() {
					return ev
				}
			}
			require.NoError(t, ctx.Err(), "no terminal event of %s's job", tenant)
			time.Sleep(20 * time.Millisecond) // polling the server
		}
	}
	ev := terminal("ACME")
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%v", ev.Data.Error)
	ev = terminal("GLOBEX")
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeRuntimeUnavailable, ev.Data.Error.Code, ev.Data.Error.Message)
	require.Equal(t, int32(1), hits.Load(), "only ACME's job reached the provider")

	kv, err := js.KeyValue(ctx, s.CatalogBucket())
	require.NoError(t, err)
	e, err := kv.Get(ctx, "toolq.core."+codeexec.ToolName)
	require.NoError(t, err)
	var entry contracts.CatalogTool
	require.NoError(t, json.Unmarshal(e.Value(), &entry))
	require.Equal(t, []string{"ACME"}, entry.Tenants)
}

// TestTenantsConfigValidated: an empty list or a name that is not a
// tenant id fails the tool's construction with invalid_input.
func TestTenantsConfigValidated(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		tenants []string
		want    string
	}{
		{[]string{}, "tenants is empty"},
		{[]string{"ACME", "no such.tenant"}, `tenant "no such.tenant" is not a tenant id`},
	} {
		_, err := codeexec.NewCodeExecution(&codeexec.Config{Tenants: c.tenants, Getenv: func(string) string { return "" }, Logger: quiet})
		require.ErrorIs(t, err, contracts.ErrInvalidInput)
		require.ErrorContains(t, err, c.want)
	}
	_, err := codeexec.NewCodeExecution(&codeexec.Config{Tenants: []string{"", "ACME"}, Getenv: func(string) string { return "" }, Logger: quiet})
	require.NoError(t, err, `"" is the default tenant`)
}
