package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

// starts records the order in which a tool's jobs start.
type starts struct {
	mu    sync.Mutex
	order []*contracts.Job
	at    map[string]time.Time
}

func (s *starts) add(job *contracts.Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = map[string]time.Time{}
	}
	s.order = append(s.order, job)
	s.at[job.ID] = time.Now()
}

func (s *starts) snapshot() []*contracts.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order)
}

func (s *starts) index(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.IndexFunc(s.order, func(j *contracts.Job) bool { return j.ID == id })
}

// waitWaiting waits until a level's loop has no pull request out: it waits
// for a slot, holding the job it was sent or about to fetch one. (With the
// one slot taken, a loop in its idle pull is sent a queued job at once and
// then waits for the slot holding it; a loop whose idle pull ended waits
// for the slot before it fetches.)
func waitWaiting(t *testing.T, js jetstream.JetStream, stream, consumer string) {
	t.Helper()
	ctx := testutil.Context(t, 10*time.Second)
	require.Eventually(t, func() bool {
		c, err := js.Consumer(ctx, stream, consumer)
		return err == nil && c.CachedInfo().NumWaiting == 0
	}, 10*time.Second, 10*time.Millisecond, "%s kept a pull request out", consumer)
}

// waitDelivered waits until the consumer has n jobs delivered and not yet
// acknowledged.
func waitDelivered(t *testing.T, js jetstream.JetStream, stream, consumer string, n int) {
	t.Helper()
	ctx := testutil.Context(t, 10*time.Second)
	require.Eventually(t, func() bool {
		c, err := js.Consumer(ctx, stream, consumer)
		return err == nil && c.CachedInfo().NumAckPending == n
	}, 10*time.Second, 10*time.Millisecond, "%s never had %d jobs in hand", consumer, n)
}

// TestHighPriorityStartsNextAndLowIsNotStarved fills a one-slot tool with a
// blocking job and 40 normal ones, then submits one high and one low job:
// the high job is the next to start, and the low one starts after some but
// at most agingLimit (4) normal ones, not after all 40.
func TestHighPriorityStartsNextAndLowIsNotStarved(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	var rec starts
	w := b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("prio", worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
			rec.add(job)
			if job.ID == "blocker" {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return json.RawMessage(`"` + string(job.Priority) + `"`), nil
		}), &worker.ToolConfig{Concurrency: 1}))
	})
	blocker := b.submit(t, "prio", ``, &producer.SubmitOpts{ID: "blocker"})
	require.Eventually(t, func() bool { return rec.index("blocker") == 0 }, 10*time.Second, 5*time.Millisecond)
	normals := make([]*contracts.Job, 40)
	for i := range normals {
		normals[i] = b.submit(t, "prio", ``, &producer.SubmitOpts{ID: fmt.Sprintf("n%02d", i)})
	}
	// The low job first, so that waiting longer does not explain the order.
	s := contracts.Subjects{}
	low := b.submit(t, "prio", ``, &producer.SubmitOpts{ID: "low", Priority: contracts.PriorityLow})
	waitWaiting(t, b.js, s.JobsStream(), s.ConsumerNameAt("prio", contracts.PriorityLow))
	high := b.submit(t, "prio", ``, &producer.SubmitOpts{ID: "high", Priority: contracts.PriorityHigh})
	waitWaiting(t, b.js, s.JobsStream(), s.ConsumerNameAt("prio", contracts.PriorityHigh))
	// Every level's loop is in line for the slot.
	require.Eventually(t, func() bool {
		lv := worker.WaitingLevels(w, "prio")
		return slices.Contains(lv, contracts.PriorityHigh) && slices.Contains(lv, contracts.PriorityNormal) && slices.Contains(lv, contracts.PriorityLow)
	}, 10*time.Second, time.Millisecond)
	close(release)

	for _, job := range append([]*contracts.Job{blocker, high, low}, normals...) {
		ev := b.await(t, job)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, job.ID)
	}
	var res string
	ev := b.await(t, high)
	require.NoError(t, json.Unmarshal(ev.Data.Result, &res))
	require.Equal(t, "high", res, "the handler sees the job's level")
	require.Equal(t, 1, rec.index("high"), "the high job starts right after the blocker: %v", ids(rec.snapshot()))
	li := rec.index("low")
	require.Greater(t, li, 2, "the low job does not jump the normal ones: %v", ids(rec.snapshot()))
	require.LessOrEqual(t, li, 2+4, "the low job waits for at most 4 normal ones: %v", ids(rec.snapshot()))
}

func ids(jobs []*contracts.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// publishTenantJobs queues n jobs of tool for tenant straight on its
// subject, as a tenant's own client would.
func publishTenantJobs(t *testing.T, js jetstream.JetStream, tenant, tool, prefix string, n int) []string {
	t.Helper()
	ctx := testutil.Context(t, 30*time.Second)
	s := contracts.Subjects{}
	out := make([]string, 0, n)
	var acks []jetstream.PubAckFuture
	for i := range n {
		id := fmt.Sprintf("%s%04d", prefix, i)
		body, err := json.Marshal(&contracts.Job{ID: id, Tool: tool, Session: "s1", CreatedAt: time.Now().UTC()})
		require.NoError(t, err)
		f, err := js.PublishAsync(s.TenantJob(tenant, tool), body, jetstream.WithMsgID(id))
		require.NoError(t, err)
		acks = append(acks, f)
		out = append(out, id)
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			require.NoError(t, err)
		case <-ctx.Done():
			t.Fatal("publish not acknowledged")
		}
	}
	return out
}

// TestQuietTenantStartsWithinBoundedDelay queues 400 jobs of 10 ms for a
// noisy tenant on a two-slot tool, then has a quiet tenant submit one job at
// a time: each starts within moments, not behind the backlog (which takes
// about 2 s to drain). The same jobs of one tenant, the backlog's in front,
// start only after it: the bound comes from the tenants' fairness.
func TestQuietTenantStartsWithinBoundedDelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, name := range []string{"NOISY", "QUIET"} {
		require.NoError(t, bus.AddTenant(testutil.Context(t, 10*time.Second), b.js, bus.Config{}, contracts.TenantRecord{Name: name}))
	}
	var rec starts
	b.startWorker(t, &worker.Config{Tenants: true}, func(w *worker.Worker) {
		require.NoError(t, w.Register("work", worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
			rec.add(job)
			time.Sleep(10 * time.Millisecond)
			return nil, nil
		}), &worker.ToolConfig{Concurrency: 2}))
	})
	noisy := publishTenantJobs(t, b.js, "NOISY", "work", "n", 400)
	var delays []time.Duration
	for i := range 5 {
		id := publishTenantJobs(t, b.js, "QUIET", "work", fmt.Sprintf("q%d-", i), 1)[0]
		sent := time.Now()
		require.Eventually(t, func() bool { return rec.index(id) >= 0 }, 20*time.Second, time.Millisecond)
		rec.mu.Lock()
		delays = append(delays, rec.at[id].Sub(sent))
		rec.mu.Unlock()
	}
	last := rec.index(noisy[len(noisy)-1])
	require.Negative(t, last, "the quiet tenant's jobs were all started before the backlog drained")
	for _, d := range delays {
		require.Less(t, d, 500*time.Millisecond, "a quiet tenant's job waited %v behind the backlog (all: %v)", d, delays)
	}
}

// TestTenantWeightsShareSlots backlogs two tenants of weights 3 and 1 on a
// one-slot tool: while both wait, the heavier one gets three starts in four.
func TestTenantWeightsShareSlots(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testutil.Context(t, 10*time.Second)
	require.NoError(t, bus.AddTenant(ctx, b.js, bus.Config{}, contracts.TenantRecord{Name: "HEAVY", Weight: 3}))
	require.NoError(t, bus.AddTenant(ctx, b.js, bus.Config{}, contracts.TenantRecord{Name: "LIGHT"}))
	release := make(chan struct{})
	var rec starts
	b.startWorker(t, &worker.Config{Tenants: true}, func(w *worker.Worker) {
		require.NoError(t, w.Register("share", worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
			if job.ID == "blocker" {
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil, nil
			}
			rec.add(job)
			time.Sleep(2 * time.Millisecond)
			return nil, nil
		}), &worker.ToolConfig{Concurrency: 1}))
	})
	// The default tenant's blocker holds the slot while both backlogs queue.
	blocker := b.submit(t, "share", ``, &producer.SubmitOpts{ID: "blocker"})
	s := contracts.Subjects{}
	waitDelivered(t, b.js, s.JobsStream(), s.ConsumerName("share"), 1)
	publishTenantJobs(t, b.js, "HEAVY", "share", "h", 60)
	publishTenantJobs(t, b.js, "LIGHT", "share", "l", 60)
	close(release)
	b.await(t, blocker)
	require.Eventually(t, func() bool { return len(rec.snapshot()) >= 40 }, 20*time.Second, 5*time.Millisecond)
	heavy := 0
	for _, j := range rec.snapshot()[:40] {
		if j.Tenant == "HEAVY" {
			heavy++
		}
	}
	require.InDelta(t, 30, heavy, 4, "HEAVY got %d of the first 40 starts", heavy)
}

// TestNormalOnlyToolRefusesOtherLevels: a tool registered NormalOnly has no
// consumer at the other levels, so a submit at one is refused as unserved,
// saying why, and nothing is queued where no worker would take it.
func TestNormalOnlyToolRefusesOtherLevels(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("guarded", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			return json.RawMessage(`1`), nil
		}), &worker.ToolConfig{NormalOnly: true}))
	})
	ev := b.await(t, b.submit(t, "guarded", ``, nil))
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	_, err := b.prod.Submit(testutil.Context(t, 5*time.Second), "guarded", nil, &producer.SubmitOpts{Priority: contracts.PriorityHigh})
	require.ErrorIs(t, err, producer.ErrToolNotServed)
	require.ErrorContains(t, err, `no worker serves tool "guarded" at priority high`)
	s := contracts.Subjects{}
	_, err = b.js.Consumer(testutil.Context(t, 5*time.Second), s.JobsStream(), s.ConsumerNameAt("guarded", contracts.PriorityHigh))
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound)
}

// running counts the jobs of each concurrency key that run at once.
type running struct {
	mu   sync.Mutex
	now  map[string]int
	peak map[string]int
}

func (r *running) enter(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.now == nil {
		r.now, r.peak = map[string]int{}, map[string]int{}
	}
	r.now[key]++
	r.peak[key] = max(r.peak[key], r.now[key])
}

func (r *running) leave(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now[key]--
}

func (r *running) peakOf(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.peak[key]
}

// keyedTool registers "keyed": it runs ms milliseconds (its input), inside
// the running count of its job's concurrency key (tenant-qualified).
func keyedTool(t *testing.T, r *running) func(w *worker.Worker) {
	t.Helper()
	return func(w *worker.Worker) {
		h := worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
			key := job.Tenant + "/" + job.Concurrency.Key
			r.enter(key)
			defer r.leave(key)
			var ms int
			_ = json.Unmarshal(job.Input, &ms)
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return nil, nil
		})
		require.NoError(t, w.Register("keyed", h, &worker.ToolConfig{Concurrency: 8}))
	}
}

// TestConcurrencyKeyCapsJobsAcrossWorkers runs 24 jobs of one key with
// limit 3, and 8 of another key with limit 8, on two workers of 8 slots
// each: at most 3 of the first key ever run at once (and 3 do), the other
// key is not held back by it, every job completes on its first attempt (a
// wait spends none), and the jobs that waited said so once each
// (throttled). No lease is left once they are done.
func TestConcurrencyKeyCapsJobsAcrossWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var r running
	b.startWorker(t, nil, keyedTool(t, &r))
	b.startWorker(t, nil, keyedTool(t, &r))
	var jobs []*contracts.Job
	for i := range 24 {
		jobs = append(jobs, b.submit(t, "keyed", `60`, &producer.SubmitOpts{
			ID: fmt.Sprintf("a%02d", i), Session: "keyed",
			Concurrency: &contracts.ConcurrencyLimit{Key: "repo-a", Limit: 3},
		}))
	}
	for i := range 8 {
		jobs = append(jobs, b.submit(t, "keyed", `60`, &producer.SubmitOpts{
			ID: fmt.Sprintf("b%02d", i), Session: "keyed",
			Concurrency: &contracts.ConcurrencyLimit{Key: "repo-b", Limit: 8},
		}))
	}
	for _, job := range jobs {
		ev := b.await(t, job)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, job.ID)
		require.Equal(t, 1, ev.Data.Attempt, "%s: waiting for a slot spent an attempt", job.ID)
	}
	require.Equal(t, 3, r.peakOf("/repo-a"), "repo-a ran more (or fewer) than its limit at once")
	require.Greater(t, r.peakOf("/repo-b"), 3, "repo-b was held back by repo-a's limit")
	throttled := map[string]int{}
	for _, ev := range b.allEvents(t, "keyed") {
		if ev.Data.Status == contracts.StatusThrottled {
			throttled[ev.Data.JobID]++
			var d contracts.ThrottledDetails
			require.NoError(t, json.Unmarshal(ev.Data.Result, &d))
			require.Equal(t, contracts.ThrottledDetails{WaitingFor: "concurrency", Key: "repo-a", Limit: 3}, d)
		}
	}
	require.NotEmpty(t, throttled, "24 jobs of limit 3: some waited")
	for id, n := range throttled {
		require.Equal(t, 1, n, "%s announced its wait %d times", id, n)
	}
	kv, err := b.js.KeyValue(testutil.Context(t, 5*time.Second), contracts.Subjects{}.ConcurrencyBucket())
	require.NoError(t, err)
	keys, err := kv.ListKeys(testutil.Context(t, 5*time.Second))
	require.NoError(t, err)
	var left []string
	for k := range keys.Keys() {
		left = append(left, k)
	}
	require.Empty(t, left, "leases left behind")
}

// TestConcurrencyKeysAreTenantsOwn: two tenants' jobs with one key and
// limit 1 run at once; the key is each tenant's.
func TestConcurrencyKeysAreTenantsOwn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, name := range []string{"ACME", "INITECH"} {
		require.NoError(t, bus.AddTenant(testutil.Context(t, 10*time.Second), b.js, bus.Config{}, contracts.TenantRecord{Name: name}))
	}
	var r running
	b.startWorker(t, &worker.Config{Tenants: true}, keyedTool(t, &r))
	ctx := testutil.Context(t, 20*time.Second)
	s := contracts.Subjects{}
	for _, tenant := range []string{"ACME", "INITECH"} {
		for i := range 2 {
			id := fmt.Sprintf("%s%d", tenant, i)
			body, err := json.Marshal(&contracts.Job{
				ID: id, Tool: "keyed", Session: "s1", Input: json.RawMessage(`400`),
				CreatedAt: time.Now().UTC(), Concurrency: &contracts.ConcurrencyLimit{Key: "shared", Limit: 1},
			})
			require.NoError(t, err)
			_, err = b.js.Publish(ctx, s.TenantJob(tenant, "keyed"), body, jetstream.WithMsgID(id))
			require.NoError(t, err)
		}
	}
	require.Eventually(t, func() bool { return r.peakOf("ACME/shared") == 1 && r.peakOf("INITECH/shared") == 1 }, 10*time.Second, 5*time.Millisecond)
	r.mu.Lock()
	both := r.now["ACME/shared"] + r.now["INITECH/shared"]
	r.mu.Unlock()
	require.Equal(t, 2, both, "each tenant's job of the key runs at once")
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.now["ACME/shared"] == 0 && r.now["INITECH/shared"] == 0 && r.peak["ACME/shared"] == 1
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, r.peakOf("ACME/shared"))
	require.Equal(t, 1, r.peakOf("INITECH/shared"))
}

// TestConcurrencyWaitCancelled: a job waiting for its key's only slot is
// cancelled while it waits; the holder runs on, alone.
func TestConcurrencyWaitCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var r running
	b.startWorker(t, nil, keyedTool(t, &r))
	key := &contracts.ConcurrencyLimit{Key: "one", Limit: 1}
	holder := b.submit(t, "keyed", `1500`, &producer.SubmitOpts{ID: "holder", Concurrency: key})
	require.Eventually(t, func() bool { return r.peakOf("/one") == 1 }, 10*time.Second, 5*time.Millisecond)
	waiter := b.submit(t, "keyed", `10`, &producer.SubmitOpts{ID: "waiter", Concurrency: key})
	require.Eventually(t, func() bool {
		for _, ev := range b.allEvents(t, waiter.Session) {
			if ev.Data.JobID == "waiter" && ev.Data.Status == contracts.StatusThrottled {
				return true
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, b.prod.Cancel(testutil.Context(t, 5*time.Second), waiter.Session, waiter.ID))
	ev := b.await(t, waiter)
	require.Equal(t, contracts.StatusCancelled, ev.Data.Status)
	// The worker's end of the wait and the producer's own cancelled event
	// race; either is the one terminal event.
	require.Equal(t, contracts.CodeCancelled, ev.Data.Error.Code)
	require.Equal(t, contracts.StatusCompleted, b.await(t, holder).Data.Status)
	require.Equal(t, 1, r.peakOf("/one"))
}

// TestConcurrencyLeaseOfDeadWorkerExpires: a worker holding the only slot
// of a key loses the server mid-job (its connection closes, nothing is
// released); its lease expires after the lease TTL, the job comes back to
// the other worker, which takes the slot and finishes it; no lease leaks.
func TestConcurrencyLeaseOfDeadWorkerExpires(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := &worker.Config{Logger: quiet, ConcurrencyLeaseTTL: time.Second, StopTimeout: time.Second}
	tc := &worker.ToolConfig{Concurrency: 2, AckWait: time.Second}
	hung := make(chan struct{})
	deadNC := b.srv.Connect(t)
	dead, err := worker.New(deadNC, cfg)
	require.NoError(t, err)
	require.NoError(t, dead.Register("keyed", worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
		close(hung)
		<-ctx.Done() // hangs until the worker is stopped
		return nil, ctx.Err()
	}), tc))
	require.NoError(t, dead.Start(testutil.Context(t, 10*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = dead.Stop(ctx)
	})
	key := &contracts.ConcurrencyLimit{Key: "solo", Limit: 1}
	job := b.submit(t, "keyed", ``, &producer.SubmitOpts{ID: "j1", Concurrency: key})
	<-hung
	deadNC.Close()

	b.startWorker(t, cfg, func(w *worker.Worker) {
		require.NoError(t, w.Register("keyed", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			return json.RawMessage(`"done"`), nil
		}), tc))
	})
	ev := b.await(t, job)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	require.Equal(t, 2, ev.Data.Attempt, "the dead worker's attempt was the first")
	kv, err := b.js.KeyValue(testutil.Context(t, 5*time.Second), contracts.Subjects{}.ConcurrencyBucket())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		keys, err := kv.ListKeys(testutil.Context(t, 5*time.Second))
		if err != nil {
			return false
		}
		n := 0
		for range keys.Keys() {
			n++
		}
		return n == 0
	}, 10*time.Second, 50*time.Millisecond, "a lease leaked")
}

// TestConcurrencyWaitersCapDoesNotDeadlock: with room for one waiting job
// and two slots, 20 jobs of a key of limit 1 all finish, in turn: the
// worker stops taking jobs past the cap instead of letting waiting jobs
// hold the slots the lease holder needs.
func TestConcurrencyWaitersCapDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var r running
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("keyed", worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
			r.enter(job.Concurrency.Key)
			defer r.leave(job.Concurrency.Key)
			time.Sleep(5 * time.Millisecond)
			return nil, nil
		}), &worker.ToolConfig{Concurrency: 2, ConcurrencyWaiters: 1}))
	})
	var jobs []*contracts.Job
	for i := range 20 {
		jobs = append(jobs, b.submit(t, "keyed", ``, &producer.SubmitOpts{
			ID:          fmt.Sprintf("d%02d", i),
			Concurrency: &contracts.ConcurrencyLimit{Key: "one", Limit: 1},
		}))
	}
	for _, job := range jobs {
		ev := b.await(t, job)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, job.ID)
		require.Equal(t, 1, ev.Data.Attempt, job.ID)
	}
	require.Equal(t, 1, r.peakOf("one"))
}

// putRateLimit writes a rate limit as `toolq limits set` does and waits
// until every given worker applies it.
func putRateLimit(t *testing.T, b *bundle, lim contracts.RateLimit, ws ...*worker.Worker) {
	t.Helper()
	ctx := testutil.Context(t, 10*time.Second)
	kv, err := b.js.KeyValue(ctx, contracts.Subjects{}.LimitsBucket())
	require.NoError(t, err)
	data, err := json.Marshal(lim)
	require.NoError(t, err)
	_, err = kv.Put(ctx, contracts.RateLimitKey(lim.Tenant, lim.Tool), data)
	require.NoError(t, err)
	for _, w := range ws {
		require.Eventually(t, func() bool { return worker.RateLimitOf(w, lim.Tenant, lim.Tool) != nil }, 10*time.Second, 5*time.Millisecond)
	}
}

// TestRateLimitAcrossWorkers: three workers share one limit of 25 jobs a
// second (burst 1) for a tool: 50 jobs start no faster than that in all,
// each on its first attempt; jobs that waited said so once. Another
// tenant's jobs of the tool are not limited by it.
func TestRateLimitAcrossWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, bus.AddTenant(testutil.Context(t, 10*time.Second), b.js, bus.Config{}, contracts.TenantRecord{Name: "ACME"}))
	var rec starts
	reg := func(w *worker.Worker) {
		require.NoError(t, w.Register("rated", worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
			rec.add(job)
			return nil, nil
		}), &worker.ToolConfig{Concurrency: 8}))
	}
	var ws []*worker.Worker
	for range 3 {
		ws = append(ws, b.startWorker(t, &worker.Config{Tenants: true}, reg))
	}
	putRateLimit(t, b, contracts.RateLimit{Tool: "rated", Rate: 25, Per: time.Second, Burst: 1}, ws...)

	acme := publishTenantJobs(t, b.js, "ACME", "rated", "acme", 50)
	var jobs []*contracts.Job
	for i := range 50 {
		jobs = append(jobs, b.submit(t, "rated", ``, &producer.SubmitOpts{ID: fmt.Sprintf("r%02d", i), Session: "rated"}))
	}
	for _, job := range jobs {
		ev := b.await(t, job)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
		require.Equal(t, 1, ev.Data.Attempt, "%s: waiting for the rate spent an attempt", job.ID)
	}
	span := func(tenant string) time.Duration {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		var first, last time.Time
		for _, j := range rec.order {
			if j.Tenant != tenant {
				continue
			}
			at := rec.at[j.ID]
			if first.IsZero() || at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
		}
		return last.Sub(first)
	}
	require.Eventually(t, func() bool { return len(rec.snapshot()) == 100 }, 10*time.Second, 10*time.Millisecond)
	got := span("")
	// 50 starts at 25/s take 49 intervals of 40 ms: 1.96 s at least (less
	// a little for clocks and the CAS round trips).
	require.GreaterOrEqual(t, got, 1900*time.Millisecond, "50 starts in %s: faster than 25/s", got)
	require.Less(t, got, 12*time.Second, "50 starts in %s: the limit held jobs back far past its rate", got)
	require.Less(t, span("ACME"), 1500*time.Millisecond, "ACME's 50 jobs are not held to the default tenant's limit")
	require.Len(t, acme, 50)
	waited := 0
	for _, ev := range b.allEvents(t, "rated") {
		if ev.Data.Status == contracts.StatusThrottled {
			waited++
			var d contracts.ThrottledDetails
			require.NoError(t, json.Unmarshal(ev.Data.Result, &d))
			require.Equal(t, contracts.ThrottledDetails{WaitingFor: "rate", Key: "rated", Rate: "25/s burst 1"}, d)
		}
	}
	require.Greater(t, waited, 10)
}

// TestDeadLetterKeepsPriority: a high job that runs out of attempts is
// dead-lettered with its level (a requeue puts it back there); a normal
// one's record names none.
func TestDeadLetterKeepsPriority(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("doomed", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			return nil, fmt.Errorf("boom")
		}), &worker.ToolConfig{Retry: worker.RetryPolicy{MaxAttempts: 1}}))
	})
	job := b.submit(t, "doomed", ``, &producer.SubmitOpts{Priority: contracts.PriorityHigh})
	require.Equal(t, contracts.StatusFailed, b.await(t, job).Data.Status)
	dl := readDLQ(t, b, "doomed")
	require.Equal(t, job.ID, dl.JobID)
	require.Equal(t, contracts.PriorityHigh, dl.Priority)
	job = b.submit(t, "doomed", ``, nil)
	require.Equal(t, contracts.StatusFailed, b.await(t, job).Data.Status)
	require.Eventually(t, func() bool { return readDLQ(t, b, "doomed").JobID == job.ID }, 10*time.Second, 20*time.Millisecond)
	require.Empty(t, readDLQ(t, b, "doomed").Priority)
}
