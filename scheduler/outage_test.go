package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/scheduler"
)

// Redis down across fire times and back with its data: the latest missed
// firing is made up once, as after any other outage.
func TestAsynqRedisOutageWithDataCatchesUpOnce(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	nc := srv.Connect(t)
	r := testutil.StartRedisWithData(t)
	e, err := scheduler.NewAsynq(nc, &scheduler.AsynqConfig{
		// A pool larger than the checks that fail in the outage: after as
		// many dial errors as its pool size, go-redis dials only once a
		// second in the background, and a check could then see Redis back
		// only after the next fire time, which makes the latest missed
		// firing a regular one (planning note: the engine's catch-up).
		Redis:              asynq.RedisClientOpt{Addr: r.Addr(), PoolSize: 100},
		Logger:             quiet(),
		RedisCheckInterval: 100 * time.Millisecond,
		StopTimeout:        5 * time.Second,
	})
	require.NoError(t, err)
	require.NoError(t, e.Start(testutil.Context(t, 15*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		require.NoError(t, e.Stop(ctx))
	})

	// Every fire time seen, as jobs arrive.
	var (
		mu    sync.Mutex
		fired = map[int64]int{}
		seen  = make(chan struct{}, 1)
	)
	js := testutil.JetStream(t, nc)
	cons, err := js.CreateOrUpdateConsumer(testutil.Context(t, 5*time.Second), contracts.Subjects{}.JobsStream(), jetstream.ConsumerConfig{
		// Every session lane's subject: a firing goes on its session's lane.
		Durable: "outage", FilterSubjects: contracts.Subjects{}.TenantJobLanes("", "outage.t", contracts.PriorityNormal), AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		j, err := contracts.DecodeJob(m.Data())
		if err == nil {
			ft, _ := time.Parse(time.RFC3339, j.Meta[scheduler.MetaFireTime])
			mu.Lock()
			fired[ft.Unix()]++
			mu.Unlock()
			select {
			case seen <- struct{}{}:
			default:
			}
		}
		_ = m.Ack()
	})
	require.NoError(t, err)
	t.Cleanup(cc.Stop)
	waitFired := func(what string, cond func(map[int64]int) bool) {
		t.Helper()
		deadline := time.After(15 * time.Second)
		for {
			mu.Lock()
			ok := cond(fired)
			mu.Unlock()
			if ok {
				return
			}
			select {
			case <-seen:
			case <-deadline:
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("%s: fired %v", what, fired)
			}
		}
	}

	_, err = e.Create(testutil.Context(t, 5*time.Second), &scheduler.Schedule{
		ID: "outage", Every: time.Second,
		Job: scheduler.Job{Tool: "outage.t", Input: []byte(`{}`)},
	})
	require.NoError(t, err)
	waitFired("first firing", func(f map[int64]int) bool { return len(f) > 0 })

	// Down across two fire times; back a little after a whole second, so
	// the latest missed fire time is before the return and the next tick
	// after it.
	r.Stop()
	down := time.Now()
	back := down.Truncate(time.Second).Add(2*time.Second + 150*time.Millisecond)
	time.Sleep(time.Until(back))
	r.Start()
	up := time.Now()
	missed := up.Truncate(time.Second)
	require.True(t, missed.After(down), "the outage spans a fire time")

	waitFired("the latest missed firing", func(f map[int64]int) bool { return f[missed.Unix()] > 0 })
	waitFired("firings after the outage", func(f map[int64]int) bool { return f[missed.Unix()+2] > 0 })
	mu.Lock()
	defer mu.Unlock()
	for ft, n := range fired {
		require.Equal(t, 1, n, "fire time %d enqueued %d times", ft, n)
	}
}
