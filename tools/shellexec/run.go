package shellexec

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/shell"
)

// emitTimeout bounds one event write of a run that may outlive its context.
const emitTimeout = 10 * time.Second

func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), emitTimeout)
}

// runApproved runs an approved plan for the exec job ref and writes the
// job's end: completed with the result (or a background session's id),
// failed when the run could not finish. One running_notice is written when
// the command runs past approvalRunningNoticeMs. A cancel of the exec job
// kills the command, and the job ends cancelled (unless the canceller
// wrote its end first).
func (s *ShellExec) runApproved(ctx context.Context, rec *Record, ref *contracts.Job) {
	plan := &rec.Approval.Plan
	if rec.Background {
		ectx, cancel := detached(ctx)
		defer cancel()
		res, err := s.startBackground(ref, plan) //nolint:contextcheck // a background session outlives the job: it hangs off the tool's lifetime
		if err != nil {
			if err := s.emit(ectx, ref, contracts.StatusFailed, 1, nil, contracts.AsError(err)); err != nil && !isEnded(err) {
				s.log.Warn("exec job not told its session did not start", slog.String("job", ref.ID), slog.Any("err", err))
			}
			return
		}
		err = s.emit(ectx, ref, contracts.StatusCompleted, 1, res, nil)
		switch {
		case isEnded(err):
			s.stopRun(ref.Tenant, ref.Session, res.SessionID, errExecEnded) // the exec job was cancelled meanwhile
		case err != nil:
			s.log.Warn("background session started; exec job not told", slog.String("job", ref.ID), slog.Any("err", err))
		}
		return
	}
	rctx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	untrack := s.track(ctx, ref.Tenant, ref.Session, ref.ID, cancelRun)
	defer untrack()

	started := make(chan time.Time, 1)
	done := make(chan struct{})
	var notices sync.WaitGroup
	if d := s.cfg.runningNotice(); d > 0 {
		notices.Add(1)
		go func() {
			defer notices.Done()
			var t0 time.Time
			select {
			case <-done:
				return
			case t0 = <-started:
			}
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-done:
			case <-t.C:
				ectx, cancel := detached(ctx)
				defer cancel()
				n := NoticeResult{ApprovalID: rec.Approval.ID, Command: plan.Command, ElapsedMs: time.Since(t0).Milliseconds()}
				if err := s.emit(ectx, ref, contracts.StatusRunningNotice, 1, n, nil); err != nil && !isEnded(err) {
					s.log.Warn("running notice not written", slog.String("job", ref.ID), slog.Any("err", err))
				}
			}
		}()
	}
	res, err := s.runner.RunWith(rctx, plan, &shell.RunOpts{Started: func() { started <- time.Now() }})
	close(done)
	notices.Wait()

	ectx, cancel := detached(ctx)
	defer cancel()
	var werr error
	switch {
	case err == nil || (res != nil && res.TimedOut):
		werr = s.emit(ectx, ref, contracts.StatusCompleted, 1, res, nil)
	case errors.Is(context.Cause(rctx), errJobCancelled):
		// A default-tenant requester's cancel may have written the end
		// already; a tenant's cannot, nor can a mark and notice alone: the
		// worker writes it, and one terminal event is kept.
		werr = s.emit(ectx, ref, contracts.StatusCancelled, 1, nil,
			contracts.Errorf(contracts.CodeCancelled, "job was cancelled while the approved command ran"))
	case ctx.Err() != nil:
		werr = s.emit(ectx, ref, contracts.StatusFailed, 1, nil,
			contracts.Errorf(contracts.CodeInternalError, "the worker stopped while the approved command ran; it is not run again"))
	default:
		werr = s.emit(ectx, ref, contracts.StatusFailed, 1, nil, contracts.AsError(err))
	}
	if werr != nil && !isEnded(werr) {
		s.log.Warn("end of an approved command not written", slog.String("job", ref.ID), slog.Any("err", werr))
	}
}

// sessionRef is the job of the background session of exec job ref.
func sessionRef(ref *contracts.Job) *contracts.Job {
	return &contracts.Job{ID: SessionID(ref.ID), Session: ref.Session, Tool: ToolExec, Meta: ref.Meta, Tenant: ref.Tenant}
}

// startBackground starts plan as a background session of the exec job ref
// and returns at once. The session's events are those of job SessionID:
// running, progress with the output, then completed or failed. It runs until
// it exits, times out, is cancelled (a cancel of the session id) or the
// worker's exec tool stops.
func (s *ShellExec) startBackground(ref *contracts.Job, plan *shell.Plan) (BackgroundResult, error) {
	if !s.takeSession() {
		return BackgroundResult{}, contracts.Errorf(contracts.CodeRuntimeUnavailable,
			"this worker runs its maximum of %d background sessions", s.cfg.MaxSessions)
	}
	sref := sessionRef(ref)
	ctx, cancel := context.WithCancelCause(s.lctx)
	tctx, tcancel := context.WithTimeout(ctx, emitTimeout)
	untrack := s.track(tctx, sref.Tenant, sref.Session, sref.ID, cancel)
	tcancel()
	st := newStreamer(s, sref, s.cfg.MaxStreamBytes)
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		defer s.dropSession()
		defer cancel(nil)
		defer untrack()
		if !s.sessionRunning(ctx, sref, plan, st) {
			return // cancelled before it started
		}
		res, err := s.runner.RunWith(ctx, plan, st.opts())
		s.endSession(ctx, sref, st, res, err)
	}()
	return BackgroundResult{Status: "running", SessionID: sref.ID, Command: plan.Command}, nil
}

// runYielding runs an allowed foreground command; when it is still running
// after yield it moves to the background (the exec contract's yieldMs): the job
// completes with a BackgroundResult and the command goes on as a session,
// whose output streams from its very start.
func (s *ShellExec) runYielding(ctx context.Context, ref *contracts.Job, plan *shell.Plan, yield time.Duration) (json.RawMessage, error) { //nolint:contextcheck // the run may outlive the job: it hangs off the tool's lifetime
	sref := sessionRef(ref)
	// The run may outlive the job, so it hangs off the tool's lifetime;
	// until the yield, the job's end (cancel, shutdown, deadline) ends it.
	rctx, cancelRun := context.WithCancelCause(s.lctx)
	st := newStreamer(s, sref, s.cfg.MaxStreamBytes)
	type outcome struct {
		res *shell.Result
		err error
	}
	done := make(chan outcome, 1)
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		res, err := s.runner.RunWith(rctx, plan, st.opts())
		done <- outcome{res, err}
	}()
	t := time.NewTimer(yield)
	defer t.Stop()
	for yielded := t.C; ; {
		select {
		case o := <-done:
			cancelRun(nil)
			return finished(ctx, o.res, o.err)
		case <-ctx.Done():
			cancelRun(context.Cause(ctx))
			o := <-done
			return finished(ctx, o.res, o.err)
		case <-yielded:
		}
		if s.takeSession() {
			break
		}
		s.log.Info("exec stays in the foreground: background sessions at their cap", slog.String("job", ref.ID))
		yielded = nil // never fires again
	}
	untrack := s.track(ctx, sref.Tenant, sref.Session, sref.ID, cancelRun)
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		defer s.dropSession()
		defer cancelRun(nil)
		defer untrack()
		if !s.sessionRunning(rctx, sref, plan, st) {
			cancelRun(errJobCancelled)
		}
		o := <-done
		s.endSession(rctx, sref, st, o.res, o.err)
	}()
	s.log.Info("exec moved to the background", slog.String("job", ref.ID), slog.Duration("yieldMs", yield))
	return mustJSON(BackgroundResult{Status: "running", SessionID: sref.ID, Command: plan.Command, Yielded: true}), nil
}

// sessionRunning writes a session's running event and starts streaming
// its output; false when the session already ended (cancelled).
func (s *ShellExec) sessionRunning(ctx context.Context, sref *contracts.Job, plan *shell.Plan, st *streamer) bool {
	ectx, cancel := detached(ctx)
	err := s.emit(ectx, sref, contracts.StatusRunning, 1, BackgroundResult{Status: "running", SessionID: sref.ID, Command: plan.Command}, nil)
	cancel()
	if isEnded(err) {
		return false
	}
	st.release(s.cfg.FlushInterval) //nolint:contextcheck // the flusher runs until the streamer stops, past this caller's ctx
	return true
}

// endSession publishes the rest of a session's output and its end.
func (s *ShellExec) endSession(ctx context.Context, sref *contracts.Job, st *streamer, res *shell.Result, err error) {
	st.close(ctx)
	ectx, cancel := detached(ctx)
	defer cancel()
	var werr error
	switch {
	case err == nil || (res != nil && res.TimedOut):
		werr = s.emit(ectx, sref, contracts.StatusCompleted, 1, res, nil)
	case errors.Is(context.Cause(ctx), errJobCancelled):
		// As for an approved command: the worker writes the end, once.
		werr = s.emit(ectx, sref, contracts.StatusCancelled, 1, nil,
			contracts.Errorf(contracts.CodeCancelled, "background session was cancelled"))
	case errors.Is(context.Cause(ctx), errExecEnded):
		werr = s.emit(ectx, sref, contracts.StatusCancelled, 1, nil,
			contracts.Errorf(contracts.CodeCancelled, "the exec job that started this session was cancelled"))
	case ctx.Err() != nil:
		werr = s.emit(ectx, sref, contracts.StatusFailed, 1, nil,
			contracts.Errorf(contracts.CodeCancelled, "the worker stopped; the background command was killed"))
	default:
		werr = s.emit(ectx, sref, contracts.StatusFailed, 1, nil, contracts.AsError(err))
	}
	if werr != nil && !isEnded(werr) {
		s.log.Warn("end of a background session not written", slog.String("session", sref.ID), slog.Any("err", werr))
	}
}

// streamer publishes a background session's output as progress events.
type streamer struct {
	s        *ShellExec
	ref      *contracts.Job
	max      int
	maxChunk int

	mu        sync.Mutex
	buf       [2][]byte
	sent      [2]int
	truncated bool
	ended     bool // the session's job ended (cancelled): stop publishing
	released  bool // publishing started (a held streamer only buffers)
	n         int

	stop chan struct{}
	wg   sync.WaitGroup
}

func newStreamer(s *ShellExec, ref *contracts.Job, maxBytes int) *streamer {
	return &streamer{s: s, ref: ref, max: maxBytes, maxChunk: 64 << 10, stop: make(chan struct{})}
}

// release starts publishing: what was written so far goes out first.
func (st *streamer) release(every time.Duration) {
	st.wg.Add(1)
	go func() {
		defer st.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-st.stop:
				return
			case <-t.C:
				st.flush(context.Background())
			}
		}
	}()
	st.mu.Lock()
	st.released = true
	st.mu.Unlock()
}

// opts are the run hooks that feed the streamer.
func (st *streamer) opts() *shell.RunOpts {
	return &shell.RunOpts{Stdout: st.writer(0), Stderr: st.writer(1)}
}

type streamWriter struct {
	st    *streamer
	which int
}

func (st *streamer) writer(which int) *streamWriter { return &streamWriter{st: st, which: which} }

// Write keeps what fits under the stream cap; the rest is dropped and the
// next chunk is flagged truncated. It never fails, so the command is never
// slowed down by a slow bus beyond the copy.
func (w *streamWriter) Write(p []byte) (int, error) {
	st := w.st
	st.mu.Lock()
	defer st.mu.Unlock()
	room := st.max - st.sent[w.which] - len(st.buf[w.which])
	keep := p
	if len(keep) > room {
		keep = keep[:max(room, 0)]
		st.truncated = true
	}
	st.buf[w.which] = append(st.buf[w.which], keep...)
	return len(p), nil
}

// flush publishes the buffered output in chunks.
func (st *streamer) flush(ctx context.Context) {
	for {
		st.mu.Lock()
		var c OutputChunk
		took := [2]int{}
		for i := range 2 {
			n := min(len(st.buf[i]), st.maxChunk)
			took[i] = n
		}
		if st.ended || !st.released || took[0] == 0 && took[1] == 0 {
			st.mu.Unlock()
			return
		}
		c.Stdout, c.Stderr = string(st.buf[0][:took[0]]), string(st.buf[1][:took[1]])
		c.Truncated = st.truncated
		st.n++
		n := st.n
		st.mu.Unlock()

		ectx, cancel := detached(ctx)
		err := st.s.emit(ectx, st.ref, contracts.StatusProgress, n, c, nil)
		cancel()
		st.mu.Lock()
		if err != nil && !isEnded(err) {
			st.n-- // try again on the next tick
			st.mu.Unlock()
			st.s.log.Debug("background output not published", slog.String("session", st.ref.ID), slog.Any("err", err))
			return
		}
		for i := range 2 {
			st.buf[i] = st.buf[i][took[i]:]
			st.sent[i] += took[i]
		}
		st.ended = isEnded(err)
		st.mu.Unlock()
	}
}

// close stops the ticker and publishes what is left (nothing when it was
// never released).
func (st *streamer) close(ctx context.Context) {
	close(st.stop)
	st.wg.Wait()
	st.flush(ctx)
}
