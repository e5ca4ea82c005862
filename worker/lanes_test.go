package worker_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

// Two sessions on different lanes ("a" hashes to lane 0, "b" to lane 1;
// contracts' TestLaneOfIsStableAndSpread pins both).
const busySession, quietSession = "a", "b"

// TestQuietSessionStartsWithinBoundedDelay queues 300 jobs of 10 ms of one
// session of the default tenant on a two-slot tool (about 1.5 s of work),
// then has another session of the same tenant submit one job at a time.
// With session lanes each starts within moments, before the backlog has
// drained; without them (the same worker with SessionLanes off) the quiet
// session's first job starts only behind the backlog: the bound is the
// lanes'.
func TestQuietSessionStartsWithinBoundedDelay(t *testing.T) {
	t.Parallel()
	require.NotEqual(t, contracts.LaneOf(busySession), contracts.LaneOf(quietSession))
	for _, lanes := range []bool{true, false} {
		t.Run(fmt.Sprintf("lanes=%v", lanes), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var rec starts
			b.startWorker(t, &worker.Config{SessionLanes: lanes}, func(w *worker.Worker) {
				require.NoError(t, w.Register("work", worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
					rec.add(job)
					time.Sleep(10 * time.Millisecond)
					return nil, nil
				}), &worker.ToolConfig{Concurrency: 2}))
			})
			ctx := testutil.Context(t, 30*time.Second)
			backlog := make([]*contracts.Job, 300)
			for i := range backlog {
				backlog[i] = &contracts.Job{ID: fmt.Sprintf("busy%03d", i), Tool: "work", Session: busySession}
			}
			res, err := b.prod.SubmitBatch(ctx, backlog, nil)
			require.NoError(t, err)
			require.Empty(t, res.Errors)

			var delays []time.Duration
			var startedBefore []int
			for i := range 5 {
				job := b.submit(t, "work", ``, &producer.SubmitOpts{ID: fmt.Sprintf("quiet%d", i), Session: quietSession})
				sent := time.Now()
				require.Eventually(t, func() bool { return rec.index(job.ID) >= 0 }, 20*time.Second, time.Millisecond)
				rec.mu.Lock()
				delays = append(delays, rec.at[job.ID].Sub(sent))
				rec.mu.Unlock()
				startedBefore = append(startedBefore, rec.index(job.ID))
			}
			if !lanes {
				// One consumer takes both sessions in the order they came:
				// the quiet session waits for the whole backlog.
				require.GreaterOrEqual(t, startedBefore[0], len(backlog), "without lanes the quiet job started before the backlog: %v", delays)
				return
			}
			require.Negative(t, rec.index(backlog[len(backlog)-1].ID), "the quiet session's jobs all started before the backlog drained")
			for _, d := range delays {
				require.Less(t, d, 500*time.Millisecond, "a quiet session's job waited %v behind another session's backlog (all: %v)", d, delays)
			}
		})
	}
}

// TestProducerLaneIsStablePerSession: every job of a session goes on the
// lane its session hashes to, at every level and on every submit (seen on
// the wire, by a plain subscription to the jobs subjects), and the worker
// runs it whether it keeps lanes apart or folds them.
func TestProducerLaneIsStablePerSession(t *testing.T) {
	t.Parallel()
	for _, lanes := range []bool{true, false} {
		t.Run(fmt.Sprintf("lanes=%v", lanes), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.startWorker(t, &worker.Config{SessionLanes: lanes}, func(w *worker.Worker) {
				require.NoError(t, w.Register("echo", worker.HandlerFunc(func(_ context.Context, job *contracts.Job) (json.RawMessage, error) {
					return json.Marshal(job.Session)
				}), nil))
			})
			s := contracts.Subjects{}
			wire := make(chan *nats.Msg, 64)
			sub, err := b.nc.ChanSubscribe(s.Jobs(), wire)
			require.NoError(t, err)
			t.Cleanup(func() { _ = sub.Unsubscribe() })
			require.NoError(t, b.nc.Flush())

			sessions := []string{"a", "b", "c", "d", "chat-7"}
			subjects := map[string][]string{}
			var jobs []*contracts.Job
			for round := range 6 {
				prio := contracts.Priorities[round%len(contracts.Priorities)]
				for _, session := range sessions {
					job := b.submit(t, "echo", ``, &producer.SubmitOpts{ID: fmt.Sprintf("%s-%d", session, round), Session: session, Priority: prio})
					jobs = append(jobs, job)
					select {
					case m := <-wire:
						require.Equal(t, job.ID, m.Header.Get(jetstream.MsgIDHeader))
						tool, p, lane := s.TenantJobLaneOf("", m.Subject)
						require.Equal(t, "echo", tool)
						require.Equal(t, prio, p)
						subjects[session] = append(subjects[session], fmt.Sprint(lane))
					case <-time.After(10 * time.Second):
						t.Fatal("no job on the wire")
					}
				}
			}
			seen := map[string]bool{}
			for _, session := range sessions {
				want := fmt.Sprint(contracts.LaneOf(session))
				require.Equal(t, slices.Repeat([]string{want}, 6), subjects[session], "session %s", session)
				seen[want] = true
			}
			require.Len(t, seen, contracts.SessionLanes, "the sessions cover every lane")
			for _, job := range jobs {
				ev := b.await(t, job)
				require.Equal(t, contracts.StatusCompleted, ev.Data.Status, job.ID)
				require.JSONEq(t, `"`+job.Session+`"`, string(ev.Data.Result))
			}
		})
	}
}

// TestGuardedToolHasNoLanes: a NormalOnly tool's consumer takes its plain
// subject only, lanes apart or folded, so a job published on one of its
// lane subjects (as an agent could, where a deny rule names the plain one)
// is taken by no consumer; the producer puts a guarded tool's jobs on the
// plain subject whatever the session.
func TestGuardedToolHasNoLanes(t *testing.T) {
	t.Parallel()
	for _, lanes := range []bool{true, false} {
		t.Run(fmt.Sprintf("lanes=%v", lanes), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.startWorker(t, &worker.Config{SessionLanes: lanes}, func(w *worker.Worker) {
				require.NoError(t, w.Register("guarded", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
					return json.RawMessage(`1`), nil
				}), &worker.ToolConfig{NormalOnly: true}))
				require.NoError(t, w.Register("open", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
					return json.RawMessage(`1`), nil
				}), nil))
			})
			ctx := testutil.Context(t, 10*time.Second)
			s := contracts.Subjects{}
			stream, err := b.js.Stream(ctx, s.JobsStream())
			require.NoError(t, err)
			var filters []string
			for ci := range stream.ListConsumers(ctx).Info() {
				filters = append(filters, ci.Config.FilterSubject)
				filters = append(filters, ci.Config.FilterSubjects...)
			}
			require.Contains(t, filters, s.Job("guarded"))
			require.Contains(t, filters, s.JobLane("open", contracts.PriorityLow, 3), "every lane of an open tool is taken")
			for lane := 1; lane < contracts.SessionLanes; lane++ {
				require.NotContains(t, filters, s.JobLane("guarded", contracts.PriorityNormal, lane))
			}
			// A guarded tool of contracts goes on its plain subject from
			// every session.
			for _, session := range []string{"a", "b", "c", "d"} {
				require.Equal(t, s.Job(contracts.ToolExecDecide), s.SessionJob(&contracts.Job{Tool: contracts.ToolExecDecide, Session: session}))
			}
		})
	}
}

// TestSessionLanesSwitch: a worker started with the other setting takes the
// consumers over (lanes apart, then folded, then apart again), and a job of
// a session on lane 1 is served after each switch.
func TestSessionLanesSwitch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := contracts.Subjects{}
	ctx := testutil.Context(t, 30*time.Second)
	for i, lanes := range []bool{true, false, true} {
		w, err := worker.New(b.srv.Connect(t), &worker.Config{SessionLanes: lanes, Logger: quiet})
		require.NoError(t, err)
		require.NoError(t, w.Register("sw", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			return json.RawMessage(`1`), nil
		}), nil))
		require.NoError(t, w.Start(ctx))
		_, err = b.js.Consumer(ctx, s.JobsStream(), s.ConsumerNameLane("sw", contracts.PriorityNormal, 1))
		if lanes {
			require.NoError(t, err, "lane 1 has its consumer")
		} else {
			require.ErrorIs(t, err, jetstream.ErrConsumerNotFound, "folded: lane 1's consumer is gone")
		}
		job := b.submit(t, "sw", ``, &producer.SubmitOpts{ID: fmt.Sprintf("sw%d", i), Session: quietSession})
		require.Equal(t, contracts.StatusCompleted, b.await(t, job).Data.Status)
		require.NoError(t, w.Stop(ctx))
	}
}

// TestLanesDoNotWidenATenantsShare backlogs two tenants of equal weight on a
// one-slot tool with lanes apart: SPREAD's jobs on all four lanes (four
// pull loops), ONE's on one lane. Tenants are served before lanes, so each
// still gets half of the starts, not four in five.
func TestLanesDoNotWidenATenantsShare(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testutil.Context(t, 30*time.Second)
	for _, name := range []string{"SPREAD", "ONE"} {
		require.NoError(t, bus.AddTenant(ctx, b.js, bus.Config{}, contracts.TenantRecord{Name: name}))
	}
	release := make(chan struct{})
	var rec starts
	b.startWorker(t, &worker.Config{Tenants: true, SessionLanes: true}, func(w *worker.Worker) {
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
	blocker := b.submit(t, "share", ``, &producer.SubmitOpts{ID: "blocker", Session: quietSession})
	s := contracts.Subjects{}
	waitDelivered(t, b.js, s.JobsStream(), s.ConsumerNameLane("share", contracts.PriorityNormal, contracts.LaneOf(quietSession)), 1)
	var acks []jetstream.PubAckFuture
	for i := range 80 {
		for tenant, session := range map[string]string{"SPREAD": []string{"a", "b", "c", "d"}[i%4], "ONE": "a"} {
			job := &contracts.Job{ID: fmt.Sprintf("%s%03d", tenant, i), Tool: "share", Session: session, CreatedAt: time.Now().UTC()}
			body, err := json.Marshal(job)
			require.NoError(t, err)
			f, err := b.js.PublishAsync(s.TenantSessionJob(tenant, job), body, jetstream.WithMsgID(job.ID))
			require.NoError(t, err)
			acks = append(acks, f)
		}
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
	close(release)
	b.await(t, blocker)
	require.Eventually(t, func() bool { return len(rec.snapshot()) >= 40 }, 20*time.Second, 5*time.Millisecond)
	spread := 0
	lanes := map[int]bool{}
	for _, j := range rec.snapshot()[:40] {
		if j.Tenant == "SPREAD" {
			spread++
			lanes[contracts.LaneOf(j.Session)] = true
		}
	}
	// Unordered, SPREAD's four loops would take 32 of 40. A loop that is
	// late back in line loses a grant to one that waits (work-conserving),
	// which on a quiet CI machine moved a share by 5.
	require.InDelta(t, 20, spread, 6, "SPREAD got %d of the first 40 starts", spread)
	require.Len(t, lanes, contracts.SessionLanes, "SPREAD's lanes took turns")
}

// TestSwitchingLanesRunsADeliveredJobOnce switches a tool's lanes apart and
// back, each time while a job is running. A work-queue consumer can only
// start at the stream's start, so the switching worker pauses the
// consumers it replaces and waits until what they delivered is
// acknowledged: made at once, the lane's new consumer delivered the
// running job a second time, and the level's consumer, widened in place,
// went on past a job queued on the lane before its last delivery, which
// never ran.
func TestSwitchingLanesRunsADeliveredJobOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := contracts.Subjects{}
	ctx := testutil.Context(t, 60*time.Second)
	laned, plain := "", ""
	for i := 0; laned == "" || plain == ""; i++ {
		s := fmt.Sprintf("s%d", i)
		if contracts.LaneOf(s) == 0 {
			plain = cmp.Or(plain, s)
		} else {
			laned = cmp.Or(laned, s)
		}
	}
	var (
		mu   sync.Mutex
		runs = map[string]int{}
	)
	started := make(chan string, 16)
	release := map[string]chan struct{}{"hold1": make(chan struct{}), "hold2": make(chan struct{})}
	register := func(slots int) func(w *worker.Worker) {
		return func(w *worker.Worker) {
			require.NoError(t, w.Register("sw", worker.HandlerFunc(func(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
				mu.Lock()
				runs[job.ID]++
				mu.Unlock()
				started <- job.ID
				if ch := release[job.ID]; ch != nil {
					select {
					case <-ch:
					case <-ctx.Done():
					}
				}
				return json.RawMessage(`1`), nil
			}), &worker.ToolConfig{Concurrency: slots}))
		}
	}
	next := func() string {
		t.Helper()
		select {
		case id := <-started:
			return id
		case <-ctx.Done():
			t.Fatal("no job started")
			return ""
		}
	}
	// startAsync starts a worker whose Start waits for the switch.
	startAsync := func(cfg *worker.Config) <-chan error {
		cfg.Logger = quiet
		w, err := worker.New(b.srv.Connect(t), cfg)
		require.NoError(t, err)
		register(1)(w)
		done := make(chan error, 1)
		go func() { done <- w.Start(ctx) }()
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			require.NoError(t, w.Stop(sctx))
		})
		return done
	}
	waitPaused := func(consumer string) {
		t.Helper()
		require.Eventually(t, func() bool { // polling the server
			c, err := b.js.Consumer(ctx, s.JobsStream(), consumer)
			return err == nil && c.CachedInfo().Paused
		}, 10*time.Second, 10*time.Millisecond, "%s was not paused for the switch", consumer)
	}

	b.startWorker(t, nil, register(2)) // folded
	hold1 := b.submit(t, "sw", ``, &producer.SubmitOpts{ID: "hold1", Session: laned})
	require.Equal(t, "hold1", next())

	// Apart, while hold1 runs: the split waits for it.
	apart := startAsync(&worker.Config{SessionLanes: true})
	waitPaused(s.ConsumerNameAt("sw", contracts.PriorityNormal))
	close(release["hold1"])
	require.Equal(t, contracts.StatusCompleted, b.await(t, hold1).Data.Status)
	require.NoError(t, <-apart)
	_, err := b.js.Consumer(ctx, s.JobsStream(), s.ConsumerNameLane("sw", contracts.PriorityNormal, contracts.LaneOf(laned)))
	require.NoError(t, err, "the lane has its consumer")
	after := b.submit(t, "sw", ``, &producer.SubmitOpts{ID: "after", Session: laned})
	require.Equal(t, "after", next(), "the lane's consumer delivered the running job again")
	require.Equal(t, contracts.StatusCompleted, b.await(t, after).Data.Status)

	// hold2 runs on the apart worker's one slot, from the lane's consumer;
	// queued waits on the lane; zero, on lane 0, runs on the folded
	// worker: the level's consumer has delivered past queued.
	hold2 := b.submit(t, "sw", ``, &producer.SubmitOpts{ID: "hold2", Session: laned})
	require.Equal(t, "hold2", next())
	queued := b.submit(t, "sw", ``, &producer.SubmitOpts{ID: "queued", Session: laned})
	zero := b.submit(t, "sw", ``, &producer.SubmitOpts{ID: "zero", Session: plain})
	require.Equal(t, "zero", next())
	require.Equal(t, contracts.StatusCompleted, b.await(t, zero).Data.Status)

	// Folded again, while hold2 runs: the fold waits for it.
	folded := startAsync(&worker.Config{})
	waitPaused(s.ConsumerNameLane("sw", contracts.PriorityNormal, contracts.LaneOf(laned)))
	close(release["hold2"])
	require.Equal(t, contracts.StatusCompleted, b.await(t, hold2).Data.Status)
	require.NoError(t, <-folded)
	require.Equal(t, "queued", next(), "the queued lane job was left behind")
	require.Equal(t, contracts.StatusCompleted, b.await(t, queued).Data.Status)
	_, err = b.js.Consumer(ctx, s.JobsStream(), s.ConsumerNameLane("sw", contracts.PriorityNormal, 1))
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound, "folded: the lanes' consumers are gone")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{"hold1": 1, "after": 1, "hold2": 1, "queued": 1, "zero": 1}, runs)
}
