package integration

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

// The default tenant's agent role of deploy/nats/approvers.conf, against a
// real nats-server process: it may register client tools, but cannot
// rewrite a worker's catalog entry, roll the catalog up, or slip a message
// schedule into the jobs stream (attacks 4 and 5 of the default tenant).
//
//nolint:paralleltest // the subtests share one server and run in order
func TestAgentRoleOfTheDefaultTenant(t *testing.T) {
	conf, err := os.ReadFile(filepath.Join("..", "deploy", "nats", "approvers.conf"))
	require.NoError(t, err)
	text := strings.NewReplacer(
		"$TOOLQ_WORKER_PASSWORD", `"worker-secret"`, "$TOOLQ_AGENT_PASSWORD", `"agent-secret"`,
	).Replace(string(conf))
	dir := t.TempDir()
	path := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600)) //nolint:gosec // G703: a fixed name in the test's temp dir
	srv := testutil.StartServerProcess(t, filepath.Join(dir, "js"), "-c", path)
	connect := func(o ...nats.Option) *nats.Conn {
		o = append(o, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		nc, err := nats.Connect(srv.URL(), o...)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	quiet := slog.New(slog.DiscardHandler)
	wnc := connect(nats.UserInfo("worker", "worker-secret"))
	w, err := worker.New(wnc, &worker.Config{Builtins: true, Logger: quiet, StopTimeout: 5 * time.Second})
	require.NoError(t, err)
	ctx := testutil.Context(t, 60*time.Second)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(testutil.Context(t, 10*time.Second)) })

	anc := connect(nats.UserInfo("agent", "agent-secret"))
	agent, err := producer.New(anc, &producer.Config{Session: "agent", Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(agent.Close)
	ajs, err := jetstream.New(anc)
	require.NoError(t, err)
	wjs, err := jetstream.New(wnc)
	require.NoError(t, err)
	s := contracts.Subjects{}
	cat, err := wjs.KeyValue(ctx, s.CatalogBucket())
	require.NoError(t, err)
	noopKey := contracts.CatalogKey("toolq:core:noop")
	before, err := cat.Get(ctx, noopKey)
	require.NoError(t, err)

	t.Run("client tools yes, workers' entries no", func(t *testing.T) {
		require.NoError(t, agent.RegisterClientTool(ctx, contracts.CatalogTool{ID: "client:app:lookup", Name: "lookup"}))
		_, err := cat.Get(ctx, contracts.CatalogKey("client:app:lookup"))
		require.NoError(t, err)
		forged := []byte(`{"id":"toolq:core:noop","tool":"evil","name":"noop","source":"toolq"}`)
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err = ajs.Publish(qctx, contracts.KVSubject(s.CatalogBucket(), noopKey), forged)
		require.Error(t, err, "an agent rewrote a worker's catalog entry")
		roll := nats.NewMsg(contracts.KVSubject(s.CatalogBucket(), "client.app.lookup"))
		roll.Data = []byte(`{}`)
		roll.Header.Set(nats.MsgRollup, nats.MsgRollupAll)
		_, err = ajs.PublishMsg(qctx, roll)
		require.Error(t, err, "a roll-up put into the catalog")
		after, err := cat.Get(ctx, noopKey)
		require.NoError(t, err)
		require.Equal(t, before.Revision(), after.Revision())
	})

	t.Run("no message schedules in the jobs stream", func(t *testing.T) {
		body, err := json.Marshal(contracts.Job{ID: "fired", Tool: worker.ToolNoop, Session: "victim", CreatedAt: time.Now()})
		require.NoError(t, err)
		for _, target := range []string{s.Job(contracts.ToolExecDecide), s.Job(worker.ToolNoop)} {
			m := nats.NewMsg(s.Job(worker.ToolNoop))
			m.Data = body
			m.Header.Set("Nats-Schedule", "@every 1s")
			m.Header.Set("Nats-Schedule-Target", target)
			qctx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := ajs.PublishMsg(qctx, m)
			cancel()
			require.Error(t, err, target)
		}
		// Nor through the schedules subjects, which only the scheduler writes.
		m := nats.NewMsg(s.Schedule("x"))
		m.Data = body
		m.Header.Set("Nats-Schedule", "@every 1s")
		m.Header.Set("Nats-Schedule-Target", s.Schedule("fire")+".x")
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err = ajs.PublishMsg(qctx, m)
		require.Error(t, err)
		// The agent's ordinary work goes on.
		job, err := agent.Submit(ctx, worker.ToolNoop, json.RawMessage(`{"ok":true}`), nil)
		require.NoError(t, err)
		ev, err := agent.Await(ctx, job.Session, job.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	})
}
