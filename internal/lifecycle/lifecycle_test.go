package lifecycle_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/toolq/toolq/internal/lifecycle"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// part is a service whose start and stop block until the test lets them
// go, and which records what ran.
type part struct {
	svc *lifecycle.Service

	startErr    error
	startGate   chan struct{} // when set, start waits for it
	startCalled chan struct{} // closed by the first start
	starts      atomic.Int32

	stopErr    error
	stopGate   chan struct{} // when set, stop waits for it
	stopCalled chan struct{} // closed by the first stop
	stops      atomic.Int32
	stopDone   atomic.Bool // set just before stop returns
	stopCtx    chan context.Context
}

func newPart() *part {
	p := &part{startCalled: make(chan struct{}), stopCalled: make(chan struct{}), stopCtx: make(chan context.Context, 8)}
	p.svc = lifecycle.New(&lifecycle.Config{
		Start: func(context.Context) error {
			if p.starts.Add(1) == 1 {
				close(p.startCalled)
			}
			if p.startGate != nil {
				<-p.startGate
			}
			return p.startErr
		},
		Stop: func(ctx context.Context) error {
			p.stopCtx <- ctx
			if p.stops.Add(1) == 1 {
				close(p.stopCalled)
			}
			if p.stopGate != nil {
				<-p.stopGate
			}
			p.stopDone.Store(true)
			return p.stopErr
		},
	})
	return p
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func endedCtx() context.Context {
	c, cancel := context.WithCancel(context.Background())
	cancel()
	return c
}

func requireClosed(t *testing.T, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
	default:
		t.Fatal(msg)
	}
}

func requireOpen(t *testing.T, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal(msg)
	default:
	}
}

func TestStopBeforeStartIsHarmless(t *testing.T) {
	t.Parallel()
	p := newPart()
	requireClosed(t, p.svc.Stopped(), "not running: Stopped is closed")
	require.NoError(t, p.svc.Stop(ctx(t)))
	require.NoError(t, p.svc.Stop(endedCtx()))
	require.Zero(t, p.stops.Load(), "nothing to stop")
	require.False(t, p.svc.Running())

	require.NoError(t, p.svc.Start(ctx(t)), "Stop before Start does not keep it from starting")
	require.True(t, p.svc.Running())
	requireOpen(t, p.svc.Stopped(), "running: Stopped is open")
	require.NoError(t, p.svc.Stop(ctx(t)))
	require.Equal(t, int32(1), p.stops.Load())
}

func TestStartTwice(t *testing.T) {
	t.Parallel()
	p := newPart()
	require.NoError(t, p.svc.Start(ctx(t)))
	require.ErrorIs(t, p.svc.Start(ctx(t)), lifecycle.ErrStarted)
	require.Equal(t, int32(1), p.starts.Load())
	require.NoError(t, p.svc.Stop(ctx(t)))

	mine := errors.New("mine: already started")
	svc := lifecycle.New(&lifecycle.Config{
		Start:      func(context.Context) error { return nil },
		Stop:       func(context.Context) error { return nil },
		ErrStarted: mine,
	})
	require.NoError(t, svc.Start(ctx(t)))
	require.ErrorIs(t, svc.Start(ctx(t)), mine)
	require.NoError(t, svc.Stop(ctx(t)))
}

func TestFailedStartLeavesItStoppedAndRestartable(t *testing.T) {
	t.Parallel()
	p := newPart()
	p.startErr = errors.New("no bus")
	require.ErrorIs(t, p.svc.Start(ctx(t)), p.startErr)
	require.False(t, p.svc.Running())
	requireClosed(t, p.svc.Stopped(), "a failed Start leaves Stopped closed")
	require.NoError(t, p.svc.Stop(ctx(t)))
	require.Zero(t, p.stops.Load(), "stop never runs for a failed start")

	p.startErr = nil
	require.NoError(t, p.svc.Start(ctx(t)), "a failed Start can be retried")
	require.True(t, p.svc.Running())
	require.NoError(t, p.svc.Stop(ctx(t)))
	require.Equal(t, int32(2), p.starts.Load())
	require.Equal(t, int32(1), p.stops.Load())
}

func TestPanickingStartLeavesItStopped(t *testing.T) {
	t.Parallel()
	svc := lifecycle.New(&lifecycle.Config{
		Start: func(context.Context) error { panic("boom") },
		Stop:  func(context.Context) error { return nil },
	})
	require.Panics(t, func() { _ = svc.Start(ctx(t)) })
	require.False(t, svc.Running())
	requireClosed(t, svc.Stopped(), "a panicked Start leaves Stopped closed")
	require.NoError(t, svc.Stop(ctx(t)))
}

func TestStopReturnsTheStopError(t *testing.T) {
	t.Parallel()
	p := newPart()
	p.stopErr = errors.New("drain failed")
	require.NoError(t, p.svc.Start(ctx(t)))
	require.ErrorIs(t, p.svc.Stop(ctx(t)), p.stopErr)
	requireClosed(t, p.svc.Stopped(), "stopped even when the stop reported an error")
	require.NoError(t, p.svc.Stop(ctx(t)), "a Stop after the stop finished has nothing to do")
}

// The first Stop's context ends while the stop still runs: it returns, the
// stop goes on, and a second Stop waits for it instead of returning at once.
func TestSecondStopWaitsForTheFirst(t *testing.T) {
	t.Parallel()
	p := newPart()
	p.stopGate = make(chan struct{})
	require.NoError(t, p.svc.Start(ctx(t)))
	stopped := p.svc.Stopped()

	first, cancelFirst := context.WithCancel(context.Background())
	firstErr := make(chan error, 1)
	go func() { firstErr <- p.svc.Stop(first) }()
	<-p.stopCalled
	cancelFirst()
	require.ErrorIs(t, <-firstErr, context.Canceled)
	require.False(t, p.stopDone.Load())
	requireOpen(t, stopped, "Stopped stays open while the stop runs")
	require.False(t, p.svc.Running())

	// A second Stop with an ended context does not wait, and says why.
	require.ErrorIs(t, p.svc.Stop(endedCtx()), context.Canceled)

	secondErr := make(chan error, 1)
	go func() {
		err := p.svc.Stop(ctx(t))
		// Whatever the timing, the stop has finished when Stop returns.
		if !p.stopDone.Load() {
			err = errors.New("second Stop returned while the stop ran")
		}
		secondErr <- err
	}()
	close(p.stopGate)
	require.NoError(t, <-secondErr)
	requireClosed(t, stopped, "Stopped closes once the stop is over")
	require.Equal(t, int32(1), p.stops.Load(), "one stop, however many Stops")

	// The stop ran with the first caller's context, which ended: the signal
	// to stop waiting politely.
	sctx := <-p.stopCtx
	require.ErrorIs(t, sctx.Err(), context.Canceled)
}

func TestConcurrentStopsRunOneStop(t *testing.T) {
	t.Parallel()
	p := newPart()
	p.stopGate = make(chan struct{})
	require.NoError(t, p.svc.Start(ctx(t)))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			err := p.svc.Stop(ctx(t))
			if err == nil && !p.stopDone.Load() {
				err = errors.New("Stop returned while the stop ran")
			}
			errs <- err
		})
	}
	<-p.stopCalled
	close(p.stopGate)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int32(1), p.stops.Load())
}

func TestStopDuringStartStopsWhatStarted(t *testing.T) {
	t.Parallel()
	p := newPart()
	p.startGate = make(chan struct{})
	startErr := make(chan error, 1)
	go func() { startErr <- p.svc.Start(ctx(t)) }()
	<-p.startCalled
	require.ErrorIs(t, p.svc.Start(ctx(t)), lifecycle.ErrStarted, "starting counts as started")
	require.ErrorIs(t, p.svc.Stop(endedCtx()), context.Canceled, "a Stop that cannot wait for the start says so")

	stopErr := make(chan error, 1)
	go func() { stopErr <- p.svc.Stop(ctx(t)) }()
	close(p.startGate)
	require.NoError(t, <-startErr)
	require.NoError(t, <-stopErr)
	require.Equal(t, int32(1), p.stops.Load(), "the Stop waited for the start, then stopped")
	require.False(t, p.svc.Running())
}

func TestStartDuringStopWaitsThenStarts(t *testing.T) {
	t.Parallel()
	p := newPart()
	p.stopGate = make(chan struct{})
	require.NoError(t, p.svc.Start(ctx(t)))
	stopErr := make(chan error, 1)
	go func() { stopErr <- p.svc.Stop(ctx(t)) }()
	<-p.stopCalled
	require.ErrorIs(t, p.svc.Start(endedCtx()), context.Canceled, "a Start that cannot wait for the stop says so")

	startErr := make(chan error, 1)
	go func() { startErr <- p.svc.Start(ctx(t)) }()
	close(p.stopGate)
	require.NoError(t, <-stopErr)
	require.NoError(t, <-startErr)
	require.True(t, p.svc.Running())
	require.Equal(t, int32(2), p.starts.Load())
	require.NoError(t, p.svc.Stop(ctx(t)))
}

func TestRestartOpensANewStopped(t *testing.T) {
	t.Parallel()
	p := newPart()
	require.NoError(t, p.svc.Start(ctx(t)))
	first := p.svc.Stopped()
	require.NoError(t, p.svc.Stop(ctx(t)))
	requireClosed(t, first, "first run's Stopped closed")

	require.NoError(t, p.svc.Start(ctx(t)))
	second := p.svc.Stopped()
	requireOpen(t, second, "second run's Stopped open")
	require.NoError(t, p.svc.Stop(ctx(t)))
	requireClosed(t, second, "second run's Stopped closed")
	require.Equal(t, int32(2), p.stops.Load())
}

// With SoftStop the first Stop's ctx is the stop function's soft deadline:
// when it ends the function hurries, and that Stop returns once it is done.
func TestSoftStopWaitsForTheStopToFinish(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	hurrying := make(chan struct{})
	var done atomic.Bool
	svc := lifecycle.New(&lifecycle.Config{
		Start: func(context.Context) error { return nil },
		Stop: func(ctx context.Context) error {
			<-ctx.Done() // the polite part: wait until the deadline
			close(hurrying)
			<-gate // cancelling what is left
			done.Store(true)
			return nil
		},
		SoftStop: true,
	})
	require.NoError(t, svc.Start(ctx(t)))
	first, cancel := context.WithCancel(context.Background())
	stopErr := make(chan error, 1)
	go func() {
		err := svc.Stop(first)
		if err == nil && !done.Load() {
			err = errors.New("Stop returned while the stop ran")
		}
		stopErr <- err
	}()
	cancel()
	<-hurrying
	// Another Stop still honours its own context.
	require.ErrorIs(t, svc.Stop(endedCtx()), context.Canceled)
	close(gate)
	require.NoError(t, <-stopErr)
	requireClosed(t, svc.Stopped(), "stopped")
}
