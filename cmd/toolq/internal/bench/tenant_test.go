package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/embedded"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

// TestTenantReadLosesNothingWhenSlow reads a tenant's events through the
// bench's tenant account with a callback that falls far behind: first
// while a replay of hundreds of events comes in (a reader once held them
// in a channel of 256 and dropped the rest, end message included), then
// while the live events of hundreds more jobs overflow the live
// subscription's limit (the read replays what it missed). Every job's
// terminal event is passed.
func TestTenantReadLosesNothingWhenSlow(t *testing.T) {
	t.Parallel()
	const jobs, bigJobs = 300, 10_500
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // a deadline, not a figure: under -race on two shared cores the test takes about a minute
	defer cancel()
	dir := t.TempDir()
	tenant, err := newBenchTenant(dir)
	require.NoError(t, err)
	srv, err := embedded.Start(&embedded.Config{StoreDir: dir, ConfigFile: tenant.configFile})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	wnc, err := srv.Connect(tenant.workerAuth()...)
	require.NoError(t, err)
	t.Cleanup(wnc.Close)
	wjs, err := jetstream.New(wnc)
	require.NoError(t, err)
	require.NoError(t, bus.AddTenant(ctx, wjs, bus.Config{}, contracts.TenantRecord{Name: benchTenantName, QueueLimit: 2*jobs + bigJobs}))
	quiet := slog.New(slog.DiscardHandler)
	w, err := worker.New(wnc, &worker.Config{Name: "slow-reader", Logger: quiet, Builtins: true, Tenants: true})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	pnc, err := srv.Connect(tenant.agentAuth()...)
	require.NoError(t, err)
	t.Cleanup(pnc.Close)
	// The live limit is far below one job's worth of events times jobs.
	p, err := producer.New(pnc, &producer.Config{Logger: quiet, TenantAccount: true, TenantFollowPending: 50})
	require.NoError(t, err)
	t.Cleanup(p.Close)

	const session = "slow-reader"
	submitAll := func() []string {
		ids := make([]string, 0, jobs)
		for i := range jobs {
			job, err := p.Submit(ctx, worker.ToolNoop, json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), &producer.SubmitOpts{Session: session})
			require.NoError(t, err)
			ids = append(ids, job.ID)
		}
		for _, id := range ids {
			ev, err := p.Await(ctx, session, id, nil)
			require.NoError(t, err)
			require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
		}
		return ids
	}
	first := submitAll()

	// A stored read whose callback stalls on the first event while the
	// whole replay arrives.
	ended := map[string]bool{}
	calls := 0
	require.NoError(t, p.ReadEvents(ctx, session, nil, func(ev *contracts.Event) error {
		if calls++; calls == 1 {
			time.Sleep(300 * time.Millisecond)
		}
		if ev.Data.Status.Terminal() {
			ended[ev.Data.JobID] = true
		}
		return nil
	}))
	for _, id := range first {
		require.True(t, ended[id], "replayed read missed job %s (%d of %d ended)", id, len(ended), jobs)
	}

	// A following read whose callback is held on its first event while
	// another round of jobs runs to the end.
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	held, release := make(chan struct{}), make(chan struct{})
	followed := map[string]bool{}
	all := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		n := 0
		done <- p.ReadEvents(fctx, session, &producer.ReadOpts{Follow: true}, func(ev *contracts.Event) error {
			if n++; n == 1 {
				close(held)
				<-release
			}
			if ev.Data.Status.Terminal() && !followed[ev.Data.JobID] {
				followed[ev.Data.JobID] = true
				if len(followed) == 2*jobs {
					close(all)
					return producer.ErrStop
				}
			}
			return nil
		})
	}()
	<-held
	second := submitAll()
	close(release)
	select {
	case <-all:
	case err := <-done:
		t.Fatalf("follow ended before every job did: %v", err)
	case <-ctx.Done():
		t.Fatal("follow did not pass every terminal event")
	}
	require.NoError(t, <-done)
	for _, id := range append(first, second...) {
		require.True(t, followed[id], "followed read missed job %s", id)
	}

	// A history longer than one replay (10,000 events) is read in pages.
	var big []*contracts.Job
	for i := range bigJobs {
		big = append(big, &contracts.Job{ID: fmt.Sprintf("big-%05d", i), Tool: worker.ToolNoop, Session: session, Input: json.RawMessage(`{}`)})
	}
	res, err := p.SubmitBatch(ctx, big, nil)
	require.NoError(t, err)
	require.Equal(t, bigJobs, res.Submitted)
	for _, j := range big[len(big)-10:] {
		_, err := p.Await(ctx, session, j.ID, nil)
		require.NoError(t, err)
	}
	events, ended := 0, map[string]bool{}
	require.Eventually(t, func() bool {
		events, ended = 0, map[string]bool{}
		require.NoError(t, p.ReadEvents(ctx, session, nil, func(ev *contracts.Event) error {
			events++
			if ev.Data.Status.Terminal() {
				ended[ev.Data.JobID] = true
			}
			return nil
		}))
		return len(ended) == 2*jobs+bigJobs
	}, 30*time.Second, 500*time.Millisecond, "every job's end read back")
	require.Greater(t, events, 10_000, "the history is longer than one replay")

	// Four reads at once, past a worker's share of a tenant's replays (2):
	// those refused as busy ask again, and each reads everything. They
	// wait for each other, so they get a context of their own.
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer rcancel()
	var g errgroup.Group
	for range 4 {
		g.Go(func() error {
			seen := map[string]bool{}
			if err := p.ReadEvents(rctx, session, nil, func(ev *contracts.Event) error {
				if ev.Data.Status.Terminal() {
					seen[ev.Data.JobID] = true
				}
				return nil
			}); err != nil {
				return err
			}
			if len(seen) != 2*jobs+bigJobs {
				return fmt.Errorf("a concurrent read passed %d jobs' ends, want %d", len(seen), 2*jobs+bigJobs)
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
}
