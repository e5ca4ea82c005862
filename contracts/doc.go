// Package contracts holds toolq's wire contract: the types that cross the bus,
// the names of its subjects and streams, the rules for ids, and the error
// codes. Every other toolq package depends on it; it imports only the
// standard library.
//
// # Overview
//
// A requester publishes a [Job] to <prefix>.jobs.<tool>; a worker consuming
// that subject runs it and publishes [Event] values, one per status change,
// to <prefix>.events.<session>.<job_id>. Both are JSON. Their JSON Schemas
// (draft 2020-12), for clients not written in Go, are embedded and returned
// by [JobSchema] and [EventSchema]. Unknown properties are allowed in both,
// so that producers and workers of different versions can run side by side
// during a rolling upgrade.
//
// # Ids and subjects
//
// Every id that becomes a subject token (session, job, run, call, approval)
// matches [A-Za-z0-9_-]{1,128}; see [ValidID] and [ValidateID]. A tool name is
// one or more such tokens joined by dots, at most 128 bytes ([ValidTool]).
// [Subjects] builds every subject, stream, bucket and consumer name from a
// configurable prefix ([DefaultPrefix] "toolq"), one method per name
// ([Subjects.RunsBucket], [Subjects.ApprovalsBucket], …); [KVStream] and
// [KVSubject] name what JetStream keeps behind a bucket. A worker never publishes to
// a subject taken from a payload: the event subject is derived from the
// validated session and job id.
//
// # Jobs
//
// [DecodeJob] parses and validates a job message body; [Job.Validate] checks
// a job built in Go before it is published. The job id is also the message's
// Nats-Msg-Id, so a retried submit is enqueued once. A nested call made by a
// code-mode run carries its [Parent], which names the continuation tool its
// end is reported to ([Parent.Continuation]).
//
// # Events
//
// Events follow CloudEvents 1.0 in structured mode: type toolq.job.<status>
// (see [Status] and [Statuses]), a deterministic id from [EventID] that is
// also the Nats-Msg-Id, and the payload in [EventData]. [NewEvent] builds
// one from a job; [DecodeEvent] parses and validates one read from the bus.
// [Status.Terminal] tells whether a status ends a job and [Status.Parked]
// whether it waits on something outside the worker.
//
// # Tools
//
// Each tool's input and result are here too, so that a requester reads them
// without importing the engine that produces them. Code mode:
// [CodeModeExecInput] and [CodeModeWaitInput] in, [CodeModeResult] out (a
// failed run's result is its error's Details). Exec: [ExecInput] in,
// [ExecResult] or [ExecBackgroundResult] out, [ExecPendingResult] on the
// approval_pending event, [ExecApprovalRecord] in the approvals bucket, and
// a signed [ExecDecision] in an exec.decide job ([ExecDecideInput]).
// code_execution: [CodeExecutionInput] in, [CodeExecutionDetails] out.
// Tool names are constants ([ToolExec], [ToolCodeModeExec], …).
//
// # Errors
//
// [Error] is both a Go error and the wire form of a failure; its [ErrorCode]
// is one of [ErrorCodes]. Each code has a sentinel (for example [ErrTimeout])
// that errors.Is matches by code through any wrapping, and [AsError] turns
// any error into an *Error. Decoding failures are always invalid_input.
// A job that exhausted its attempts goes to <prefix>.dlq.<tool> as a
// [DeadLetter].
package contracts
