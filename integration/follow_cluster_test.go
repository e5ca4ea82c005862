package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
)

// A requester's session follower is an R1 consumer on one server of the
// cluster. When that server dies, the follower notices within two of its
// 1 s heartbeats and makes its consumer again on a live server, from the
// event after the last it passed on: every event comes once, in order,
// and the first one stored after the kill arrives within 6 s of the last
// one before it. The producer is connected to another server (no
// reconnect tells it anything), and the killed server leads neither the
// meta layer nor the events stream (no election is waited for), so the
// follower's own detection is all that is measured: jetstream's ordered
// consumer, which the follower was before, sees no heartbeat for 10 s
// (two of its 5 s) after the last message before it does anything.
func TestFollowerComesBackSoonAfterItsServerDies(t *testing.T) { //nolint:paralleltest // SIGKILLs a server of a 3-node cluster whose ports come from FreePort, which can race with another test's pick
	servers, monitors := testutil.StartCluster(t, 3)
	ctx := ctxFor(t, 180*time.Second)
	var seeds []string
	for _, s := range servers {
		seeds = append(seeds, s.URL())
	}
	admin, err := nats.Connect(strings.Join(seeds, ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	js, err := jetstream.New(admin)
	require.NoError(t, err)
	for deadline := time.Now().Add(60 * time.Second); ; {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(actx) // unanswered until a meta leader exists
		cancel()
		if err == nil {
			break
		}
		require.False(t, time.Now().After(deadline), "JetStream not ready: %v", err)
		time.Sleep(100 * time.Millisecond) // polling the cluster
	}
	require.NoError(t, bus.Ensure(ctx, js, bus.Config{Replicas: 3}))
	events, err := bus.NewEvents(ctx, js, contracts.Subjects{})
	require.NoError(t, err)
	stream := contracts.Subjects{}.EventsStream()

	// The requester talks to server 0 only.
	nc, err := nats.Connect(servers[0].URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	prod, err := producer.New(nc, &producer.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(prod.Close)

	type follow struct {
		session string
		got     chan string
		stop    context.CancelFunc
		done    chan error
	}
	start := func(session string) *follow {
		fctx, stop := context.WithCancel(ctx)
		f := &follow{session: session, got: make(chan string, 64), stop: stop, done: make(chan error, 1)}
		go func() {
			f.done <- prod.ReadEvents(fctx, session, &producer.ReadOpts{Follow: true}, func(ev *contracts.Event) error {
				f.got <- ev.Data.JobID
				return nil
			})
		}()
		return f
	}
	// host is the server of the session's follower's consumer.
	host := func(session string) string {
		filter := contracts.Subjects{}.SessionEvents(session)
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) { // polling the cluster
			st, err := js.Stream(ctx, stream)
			if err != nil {
				continue
			}
			infos := st.ListConsumers(ctx)
			for ci := range infos.Info() {
				if ci.Config.FilterSubject == filter && ci.Cluster != nil && ci.Cluster.Leader != "" {
					return ci.Cluster.Leader
				}
			}
		}
		t.Fatalf("no consumer follows %s", session)
		return ""
	}
	// Followers are made until one lives on a server that is neither the
	// requester's, nor the meta leader, nor the events stream's leader
	// (placement is random: one in three at least). For such a server to
	// exist, the events stream is led by server 0 or by the meta leader.
	meta := metaLeader(t, ctx, monitors[0])
	streamLeader := func() string {
		st, err := js.Stream(ctx, stream)
		require.NoError(t, err)
		return st.CachedInfo().Cluster.Leader
	}
	if l := streamLeader(); l != "toolq-0" && l != meta {
		body, err := json.Marshal(map[string]any{"placement": map[string]string{"preferred": "toolq-0"}})
		require.NoError(t, err)
		resp, err := admin.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, body)
		require.NoError(t, err)
		require.NotContains(t, string(resp.Data), `"error"`)
		require.Eventually(t, func() bool { return streamLeader() == "toolq-0" }, 30*time.Second, 50*time.Millisecond)
	}
	var (
		f      *follow
		victim = -1
	)
	for try := 0; victim < 0; try++ {
		require.Less(t, try, 30, "no follower placed on a server that can be killed alone")
		f = start(fmt.Sprintf("placed-%d", try))
		h := host(f.session)
		if h != "toolq-0" && h != streamLeader() && h != metaLeader(t, ctx, monitors[0]) {
			_, err := fmt.Sscanf(h, "toolq-%d", &victim)
			require.NoError(t, err)
			break
		}
		f.stop()
		require.ErrorIs(t, <-f.done, context.Canceled)
	}
	emit := func(jobID string) {
		t.Helper()
		ev := contracts.NewEvent("/test", &contracts.Job{ID: jobID, Session: f.session, Tool: contracts.ToolNoop}, contracts.StatusCompleted, 1, time.Now())
		require.Eventually(t, func() bool {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := events.Publish(pctx, ev, 0, "")
			return err == nil || bus.IsWrongLastSequence(err) // a retry of a write that went through
		}, 60*time.Second, 100*time.Millisecond)
	}
	next := func() string {
		t.Helper()
		select {
		case id := <-f.got:
			return id
		case <-time.After(60 * time.Second):
			t.Fatal("the follower passed nothing on")
			return ""
		}
	}
	emit("before")
	require.Equal(t, "before", next())
	lastBefore := time.Now() // the consumer's last delivery: its heartbeat clock starts here
	servers[victim].Kill()
	emit("after-1")
	emit("after-2")
	require.Equal(t, "after-1", next())
	back := time.Since(lastBefore)
	require.Equal(t, "after-2", next())
	require.Less(t, back, 6*time.Second, "the follower came back only after %s", back)
	emit("after-3")
	require.Equal(t, "after-3", next())
	select {
	case id := <-f.got:
		t.Fatalf("event %s passed on twice", id)
	case <-time.After(time.Second): // a duplicate would follow at once
	}
	f.stop()
	require.ErrorIs(t, <-f.done, context.Canceled)
	t.Logf("the follower on %s came back %s after its last delivery", servers[victim].URL(), back)
}

// metaLeader is the cluster's meta leader as the server with monitoring
// port mon sees it.
func metaLeader(t *testing.T, ctx context.Context, mon int) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/jsz", mon), nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var jsz struct {
		Meta struct {
			Leader string `json:"leader"`
		} `json:"meta_cluster"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&jsz))
	return jsz.Meta.Leader
}
