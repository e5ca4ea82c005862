package shellexec

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/providers/shell"
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
// kills the command (the cancel already wrote the job's end).
func (s *ShellExec) runApproved(ctx context.Context, rec *Record, ref *contracts.Job) {
	plan := &rec.Approval.Plan
	if rec.Background {
		res := s.startBackground(ref, plan)
		ectx, cancel := detached(ctx)
		defer cancel()
		err := s.emit(ectx, ref, contracts.StatusCompleted, 1, res, nil)
		switch {
		case isEnded(err):
			s.stopRun(res.SessionID, errExecEnded) // the exec job was cancelled meanwhile
		case err != nil:
			s.log.Warn("background session started; exec job not told", slog.String("job", ref.ID), slog.Any("err", err))
		}
		return
	}
	rctx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	untrack := s.track(ctx, ref.ID, cancelRun)
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
		return // the cancel wrote the job's end
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

// startBackground starts plan as a background session of the exec job ref
// and returns at once. The session's events are those of job SessionID:
// running, progress with the output, then completed or failed. It runs until
// it exits, times out, is cancelled (a cancel of the session id) or the
// worker's exec tool stops.
func (s *ShellExec) startBackground(ref *contracts.Job, plan *shell.Plan) BackgroundResult {
	sid := SessionID(ref.ID)
	sref := &contracts.Job{ID: sid, Session: ref.Session, Tool: ToolExec, Meta: ref.Meta}
	ctx, cancel := context.WithCancelCause(s.lctx)
	tctx, tcancel := context.WithTimeout(ctx, emitTimeout)
	untrack := s.track(tctx, sid, cancel)
	tcancel()
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		defer cancel(nil)
		defer untrack()
		s.runBackground(ctx, sref, plan)
	}()
	return BackgroundResult{Status: "running", SessionID: sid, Command: plan.Command}
}

func (s *ShellExec) runBackground(ctx context.Context, sref *contracts.Job, plan *shell.Plan) {
	log := s.log.With(slog.String("session", sref.ID))
	ectx, cancel := detached(ctx)
	err := s.emit(ectx, sref, contracts.StatusRunning, 1, BackgroundResult{Status: "running", SessionID: sref.ID, Command: plan.Command}, nil)
	cancel()
	if isEnded(err) {
		return // cancelled before it started
	}
	st := newStreamer(s, sref, s.cfg.MaxStreamBytes, s.cfg.FlushInterval)
	res, err := s.runner.RunWith(ctx, plan, &shell.RunOpts{Stdout: st.writer(0), Stderr: st.writer(1)})
	st.close(ctx)

	ectx, cancel = detached(ctx)
	defer cancel()
	var werr error
	switch {
	case err == nil || (res != nil && res.TimedOut):
		werr = s.emit(ectx, sref, contracts.StatusCompleted, 1, res, nil)
	case errors.Is(context.Cause(ctx), errJobCancelled):
		return
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
		log.Warn("end of a background session not written", slog.Any("err", werr))
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
	n         int

	stop chan struct{}
	wg   sync.WaitGroup
}

func newStreamer(s *ShellExec, ref *contracts.Job, maxBytes int, every time.Duration) *streamer {
	st := &streamer{s: s, ref: ref, max: maxBytes, maxChunk: 64 << 10, stop: make(chan struct{})}
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
	return st
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
		if st.ended || took[0] == 0 && took[1] == 0 {
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

// close stops the ticker and publishes what is left.
func (st *streamer) close(ctx context.Context) {
	close(st.stop)
	st.wg.Wait()
	st.flush(ctx)
}
