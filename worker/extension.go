package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// Extension is a part with a lifecycle of its own that lives alongside the
// worker — a tool pack's background loops (expiry followers, sessions), a
// connection its tools use. The worker starts every extension after its
// streams exist and before it pulls a job, and stops them after its jobs
// have drained, so a handler never runs while an extension is down.
type Extension interface {
	// Start brings the extension up; Worker.Start fails (and stops the
	// extensions it already started) when it returns an error.
	Start(ctx context.Context) error
	// Stop brings it down. The worker waits for Stop to return: its ctx
	// carries no deadline.
	Stop(ctx context.Context) error
}

// Use adds an extension. Extensions start in the order of Use and stop in
// reverse order. Use returns ErrStarted once Start has begun.
func (w *Worker) Use(ext Extension) error {
	if ext == nil {
		return errors.New("worker: use: nil extension")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return ErrStarted
	}
	w.exts = append(w.exts, ext)
	return nil
}

// CancelHook is told of a job cancelled while the worker runs: its tenant
// ("" for the default one, else from the cancel mark's key, which the
// server wrote from the canceller's account), session and id (valid ids),
// from the worker's one cancel feed. Hooks run one
// at a time, in the order of OnCancel, on a loop of their own (they do not
// hold up the worker's own cancellation of the job), with a context that
// ends when the worker stops. Cancels recorded before the worker started
// are not replayed.
type CancelHook func(ctx context.Context, tenant, session, jobID string)

// OnCancel adds a hook to the cancel feed, so that a tool pack follows
// cancellations without watching the cancels bucket itself. It returns
// ErrStarted once Start has begun.
func (w *Worker) OnCancel(h CancelHook) error {
	if h == nil {
		return errors.New("worker: on cancel: nil hook")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return ErrStarted
	}
	w.onCancel = append(w.onCancel, h)
	return nil
}

// startExtensions starts exts in order and returns those that started.
func (w *Worker) startExtensions(ctx context.Context, exts []Extension) ([]Extension, error) {
	for i, ext := range exts {
		if err := ext.Start(ctx); err != nil {
			return exts[:i], fmt.Errorf("worker: start extension %T: %w", ext, err)
		}
	}
	return exts, nil
}

// stopExtensions stops exts in reverse order, every one of them whatever
// the others do.
func (w *Worker) stopExtensions(ctx context.Context, exts []Extension) error {
	var errs []error
	for i := len(exts) - 1; i >= 0; i-- {
		if err := exts[i].Stop(ctx); err != nil {
			w.log.Warn("extension did not stop cleanly", slog.String("extension", fmt.Sprintf("%T", exts[i])), slog.Any("err", err))
			errs = append(errs, fmt.Errorf("worker: stop extension %T: %w", exts[i], err))
		}
	}
	return errors.Join(errs...)
}
