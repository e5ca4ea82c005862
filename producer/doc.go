// Package producer is the Go client of requesters: it submits jobs, awaits
// their events, cancels them and reads a session's event history. It
// depends on contracts and NATS only: reading a result never needs an
// engine package (sandbox, shell, tools/…).
//
// # Submitting
//
// Submit validates the job and publishes it on toolq.jobs.<tool> with the
// job id as Nats-Msg-Id, so resubmitting the same id inside the duplicate
// window enqueues it once. Each tool has a typed helper that checks its
// input before publishing: SubmitCode and Wait (code mode), SubmitExec and
// Decide (approval-gated exec), SubmitCodeExecution, SubmitToolResult (an
// answer to a code-mode run's client tool call).
//
// # Awaiting
//
// Await follows a session through one consumer shared by every waiter of
// that session and demultiplexes events to them; when that consumer is lost
// (its server died: two missed heartbeats of Config.FollowHeartbeat), the
// follower makes another that starts after the last event it passed on, so
// no event is lost or passed twice. ReadEvents with Follow does the same
// for one reader. It subscribes
// first and then reads the job's last stored event, so an event published
// before the call is found as surely as one published after it. A context
// without a deadline gets Config.AwaitTimeout (DefaultAwaitTimeout).
//
// # Reading results
//
// DecodeResult decodes any event's result into the contracts type of its
// tool. CodeModeResult reads a code-mode run's contracts.CodeModeResult from
// any of its terminal or waiting events (AwaitCodeMode awaits and reads in
// one call); ExecResult reads an exec job's end. Approval reads an exec
// approval record for an approver to sign.
//
// # Cancelling
//
// Cancel records the job in the toolq_cancels bucket (a queued job never
// starts), announces it to running workers, and writes the cancelled event
// unless the job already ended (ErrFinished).
package producer
