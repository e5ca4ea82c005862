package worker

import (
	"errors"
	"fmt"
	"time"

	"github.com/toolq/toolq/contracts"
)

// Errors returned by the worker's own methods.
var (
	// ErrStarted is returned by Register after Start and by a second Start.
	ErrStarted = errors.New("worker: already started")
	// ErrDuplicateTool is returned when a tool is registered twice.
	ErrDuplicateTool = errors.New("worker: tool already registered")
	// ErrJobEnded is returned by Emit when the job already has a terminal
	// event.
	ErrJobEnded = errors.New("worker: job already ended")
	// ErrNotStarted is returned by Rates.Take before the worker started.
	ErrNotStarted = errors.New("worker: not started")
)

// PermanentError marks a handler's failure as not worth retrying: the job
// fails at once with a failed event.
type PermanentError struct{ Err error }

// Permanent wraps err so that the job fails without another attempt.
func Permanent(err error) error { return &PermanentError{Err: err} }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// RetryAfterError asks for another attempt after a given delay (counting
// against the job's attempts), overriding the retry policy's delay.
type RetryAfterError struct {
	Delay time.Duration
	Err   error
}

// RetryAfter wraps err so that the job is retried after d.
func RetryAfter(d time.Duration, err error) error { return &RetryAfterError{Delay: d, Err: err} }

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %v", e.Delay, e.Err)
}
func (e *RetryAfterError) Unwrap() error { return e.Err }

// ParkError ends a job's current step without ending the job: the worker
// publishes an event with the parked status (waiting, approval_pending) and
// the handler's result, and acknowledges the message. Whatever continues the
// job later (a resume, an approval) writes its next events with Emit.
type ParkError struct {
	Status contracts.Status
	// N numbers repeated parked events of the same job (1 for the first).
	N int
}

// Park returns the error that parks the job with status (which must be
// Parked) as the n-th such event. The handler's result goes with the event
// and must be valid JSON; a park that breaks either rule fails the job at
// once with internal_error, never retried.
func Park(status contracts.Status, n int) error { return &ParkError{Status: status, N: max(n, 1)} }

func (e *ParkError) Error() string { return "parked: " + string(e.Status) }

// DeniedError ends a job with a denied terminal event instead of failed: a
// policy refused what the job asked for. A refusal is an answer, not a
// failure: it is never retried, and the handler's result (when it is valid
// JSON) goes with the event, next to an error with code denied and Reason.
type DeniedError struct {
	Reason string
}

// Deny returns the error that ends the job as denied for reason.
func Deny(reason string) error { return &DeniedError{Reason: reason} }

func (e *DeniedError) Error() string { return "denied: " + e.Reason }
