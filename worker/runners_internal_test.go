package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRunnersReuseAnIdleRunner: a job after another one finished runs on
// the same runner, and no job waits for a runner while others run.
func TestRunnersReuseAnIdleRunner(t *testing.T) {
	t.Parallel()
	r := newRunners()
	var loops sync.WaitGroup
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan int, 16)
	r.do(ctx, &loops, func() { ran <- 1 })
	require.Equal(t, 1, <-ran)
	// The runner is idle once its job returned: it takes the next job.
	select {
	case r.work <- func() { ran <- 2 }:
	case <-time.After(10 * time.Second):
		t.Fatal("no idle runner took the second job")
	}
	require.Equal(t, 2, <-ran)
	require.EqualValues(t, 1, r.started.Load())

	// Jobs that block get a runner each at once.
	release := make(chan struct{})
	var running sync.WaitGroup
	running.Add(8)
	for range 8 {
		r.do(ctx, &loops, func() { running.Done(); <-release })
	}
	running.Wait()
	require.GreaterOrEqual(t, r.started.Load(), int64(8))
	require.LessOrEqual(t, r.started.Load(), int64(9))
	close(release)

	// Runners end with their context.
	cancel()
	done := make(chan struct{})
	go func() { loops.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("runners outlived their context")
	}
}
