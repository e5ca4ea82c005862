package producer

import "errors"

var (
	// ErrFinished is returned by Cancel for a job that already ended.
	ErrFinished = errors.New("producer: job already ended")
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
