package producer

import "errors"

var (
	// ErrFinished is returned by Cancel for a job that already ended.
	ErrFinished = errors.New("producer: job already ended")
	// ErrUnknownJob is returned by Cancel for a job the session has no
	// trace of: no event of it and no message of it in the queue. No
	// cancelled event is written; the cancel mark is, so that a job of the
	// session submitted with the id afterwards (a submit that raced the
	// cancel) still never starts.
	ErrUnknownJob = errors.New("producer: no such job in this session")
	// ErrToolNotServed is returned by a submit for a tool no worker has
	// ever served (the jobs stream holds no consumer for it): nothing is
	// enqueued. The error also matches a contracts.Error with code
	// invalid_input, whose message lists the tools that are served.
	ErrToolNotServed = errors.New("producer: no worker serves the tool")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("producer: closed")
	// ErrDuplicate is returned by a submit whose job id the bus already
	// holds inside its duplicate window (the server's PubAck said
	// Duplicate): nothing new was enqueued. It is a retry's success when
	// the earlier submit was the caller's own, and a collision otherwise;
	// either way the job that runs is the earlier one.
	ErrDuplicate = errors.New("producer: duplicate job id: already submitted")
	// ErrStop can be returned by a ReadEvents callback to end the read early
	// without an error.
	ErrStop = errors.New("producer: stop reading")
	// ErrNoApproval is returned by Approval for an approval that does not
	// exist (never made, or expired).
	ErrNoApproval = errors.New("producer: no such approval")
	// ErrNoResult is returned by the result readers (DecodeResult,
	// CodeModeResult, ExecResult) for an event that carries no result of
	// the kind asked for: a running or progress event, or another tool's.
	ErrNoResult = errors.New("producer: event carries no such result")
)
