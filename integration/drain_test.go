package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
)

// term sends SIGTERM and waits for the process to exit, within d; it
// returns the exit code.
func (p *proc) term(t *testing.T, d time.Duration) int {
	t.Helper()
	require.NoError(t, syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM))
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("worker %s did not exit within %s of SIGTERM: %s", p.name, d, p.output())
	}
	return p.cmd.ProcessState.ExitCode()
}

// TestRollingRestartUnderLoad restarts every worker process, one after the
// other, with SIGTERM while jobs keep arriving and run: each worker stops
// pulling, finishes what it runs within its stop timeout and exits 0; the
// next one takes the queue. Nothing is lost, nothing ends twice, and no job
// is delivered again: each completes on its first attempt (a job that was
// finishing when its worker was told to stop is not handed to another).
// The ack wait is long (30 s), so a job left unacknowledged would show as
// missing from the deadline, not as a quick redelivery.
func TestRollingRestartUnderLoad(t *testing.T) { //nolint:paralleltest // runs worker processes against a nats-server on a FreePort port
	e := setup(t)
	flags := []string{"--no-code-mode", "--no-exec", "--concurrency", "8", "--ack-wait", "30s", "--stop-timeout", "15s"}
	workers := []*proc{
		startWorker(t, e.srv.URL(), "A", e.keyFile, flags...),
		startWorker(t, e.srv.URL(), "B", e.keyFile, flags...),
	}
	ctx := ctxFor(t, 3*time.Minute)

	// Load: sleep jobs of 50–250 ms, submitted in waves until the restarts
	// are done.
	var (
		mu   sync.Mutex
		ids  []string
		stop = make(chan struct{})
		sent = make(chan error, 1)
	)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				sent <- nil
				return
			default:
			}
			for range 20 {
				in := json.RawMessage(fmt.Sprintf(`{"ms":%d}`, 50+(n*37)%200))
				job, err := e.prod.Submit(ctx, "sleep", in, &producer.SubmitOpts{ID: fmt.Sprintf("load-%d", n)})
				if err != nil {
					sent <- err
					return
				}
				mu.Lock()
				ids = append(ids, job.ID)
				mu.Unlock()
				n++
			}
			time.Sleep(50 * time.Millisecond) // the next wave
		}
	}()
	time.Sleep(500 * time.Millisecond) // let both workers fill up

	// Rolling restart: each worker in turn is stopped and replaced.
	for i, w := range workers {
		require.Equal(t, 0, w.term(t, 30*time.Second), "worker %s exits 0 after a drain: %s", w.name, w.output())
		workers[i] = startWorker(t, e.srv.URL(), w.name+"2", e.keyFile, flags...)
		time.Sleep(300 * time.Millisecond) // the new worker takes load before the next stops
	}
	close(stop)
	require.NoError(t, <-sent)
	mu.Lock()
	want := append([]string(nil), ids...)
	mu.Unlock()
	require.Greater(t, len(want), 100, "the load ran through the restarts")

	// Every job completes once, on its first attempt.
	type seen struct{ terminal, attempt int }
	got := map[string]*seen{}
	follow, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	done := 0
	err := e.prod.ReadEvents(follow, "it", &producer.ReadOpts{Follow: true}, func(ev *contracts.Event) error {
		if !ev.Data.Status.Terminal() {
			return nil
		}
		s := got[ev.Data.JobID]
		if s == nil {
			s = &seen{}
			got[ev.Data.JobID] = s
		}
		s.terminal++
		s.attempt = ev.Data.Attempt
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "job %s: %+v", ev.Data.JobID, ev.Data.Error)
		if s.terminal == 1 {
			done++
		}
		if done == len(want) {
			cancel()
		}
		return nil
	})
	require.Equal(t, len(want), done, "all jobs ended before the deadline (read: %v)", err)
	for _, id := range want {
		s := got[id]
		require.NotNil(t, s, "job %s was lost", id)
		require.Equal(t, 1, s.terminal, "job %s ended %d times", id, s.terminal)
		require.Equal(t, 1, s.attempt, "job %s was delivered again", id)
	}
	t.Logf("%d jobs through a rolling restart of 2 workers: none lost, none delivered twice", len(want))
}
