package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
)

// startCluster starts a 3-node JetStream cluster of nats-server processes.
func startCluster(t *testing.T) []*testutil.ServerProcess {
	t.Helper()
	servers, _ := testutil.StartCluster(t, 3)
	return servers
}

// R3 streams on a 3-node cluster: one server is SIGKILLed while jobs are
// submitted and run; every job still completes, exactly once.
func TestClusterSurvivesServerLoss(t *testing.T) { //nolint:paralleltest // SIGKILLs a server of a 3-node cluster whose ports come from FreePort, which can race with another test's pick
	servers := startCluster(t)
	var seeds []string
	for _, s := range servers {
		seeds = append(seeds, s.URL())
	}
	url := strings.Join(seeds, ",")
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := ctxFor(t, 180*time.Second)
	// JetStream needs its meta leader before streams can be created.
	for deadline := time.Now().Add(60 * time.Second); ; {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(actx) // unanswered until a meta leader exists
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream not ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // polling the cluster
	}

	e := setup(t) // for the snapshot key; its single server is not used
	startWorker(t, url, "A", e.keyFile, "--replicas", "3", "--no-code-mode")
	startWorker(t, url, "B", e.keyFile, "--replicas", "3", "--no-code-mode")
	st, err := js.Stream(ctx, "TOOLQ_JOBS")
	require.NoError(t, err)
	require.Equal(t, 3, st.CachedInfo().Config.Replicas)

	prod, err := producer.New(nc, &producer.Config{Session: "cluster"})
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	const jobs = 300
	ids := make([]string, 0, jobs)
	for i := range jobs {
		if i == jobs/3 {
			servers[1].Kill() // a third of the way in, one server dies
		}
		var job *contracts.Job
		require.Eventually(t, func() bool {
			sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			// Retried (same id: enqueued once) while the cluster elects
			// new leaders.
			job, err = prod.Submit(sctx, "sleep", json.RawMessage(`{"ms":5}`), &producer.SubmitOpts{ID: fmt.Sprintf("c-%d", i)})
			return err == nil
		}, 60*time.Second, 100*time.Millisecond)
		ids = append(ids, job.ID)
	}
	for _, id := range ids {
		ev, err := prod.Await(ctx, "cluster", id, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, id)
	}
	terminal := map[string]int{}
	require.NoError(t, prod.ReadEvents(ctx, "cluster", nil, func(ev *contracts.Event) error {
		if ev.Data.Status.Terminal() {
			terminal[ev.Data.JobID]++
		}
		return nil
	}))
	require.Len(t, terminal, jobs)
	for id, n := range terminal {
		require.Equal(t, 1, n, id)
	}
}
