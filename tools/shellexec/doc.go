// Package shellexec puts the exec contract's approval-gated exec tool on the bus: it
// registers the tools exec and exec.decide on a worker and wires the pure
// pieces of package shell (policy, plans, approvals, signed decisions,
// the runner) to JetStream.
//
// # exec
//
// An exec job's input is shell.Input. Its policy is the worker's
// (Config.Policy) merged with the shared one in the toolq_exec_policy
// bucket — which adds allowlist entries and safe bins and can only tighten
// the modes — and then made stricter by the job (shell.Effective). The job
// ends in one of three ways:
//
//   - denied: the policy refuses the command. The event's error has code
//     denied and the reason; its result is a DeniedResult.
//   - completed: the command was allowed and ran; the result is a
//     shell.Result (exit code, capped stdout and stderr, duration,
//     timedOut). A timeout is a completed run with timedOut set; a sandbox
//     that cannot start fails the job with runtime_unavailable.
//   - approval_pending: the command needs a person. The approval (the exact
//     plan: argv, workdir, env, host, timeout, bound by its hash) is
//     recorded in the toolq_approvals bucket under the job's id with the
//     approval TTL, and the job parks with a PendingResult.
//
// exec runs at most once: a job whose worker dies while it runs fails
// through the DLQ instead of running its command again.
//
// # Decisions
//
// An approver signs a shell.ApprovalDecision with an nkey and submits it as
// an exec.decide job (toolq approve / toolq deny, or the producer's Decide).
// The worker verifies it against Config.Approvers and decides the approval
// once, by a write conditional on the record's revision; a refused decision
// fails its decide job with code denied and changes nothing, a second or
// replayed one completes with applied=false. Then the exec job continues
// with Emit: approved, at most one running_notice when the command runs past
// approvalRunningNoticeMs, and completed (or failed); or denied with the
// approver's reason. "approve --always" first adds the approval's unlisted
// binaries to the shared allowlist. An approval nobody decides expires: the
// bucket's expiry marker denies the job with reason timeout. Cancelling a
// pending exec job marks its approval cancelled, so no later decision runs
// it; cancelling it while the approved command runs kills the command.
//
// # Background sessions
//
// With background set the job completes at once with a BackgroundResult
// naming a session id, and so does an allowed foreground command still
// running after the job's yieldMs (10 s by default; 0 never yields); the command's own events are those of a job with
// that id in the same session: running, progress events with its output
// (OutputChunk), and a terminal completed (a shell.Result) or failed event.
// Cancelling the session id kills the command. Sessions live in the worker
// that started them and are killed when it stops.
package shellexec
