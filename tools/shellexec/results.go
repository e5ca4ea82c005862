package shellexec

import (
	"github.com/toolq/toolq/contracts"
)

// PendingResult is the result of an exec job's approval_pending event.
type PendingResult = contracts.ExecPendingResult

// DeniedResult is the result of an exec job's denied event; its error has
// code denied and the same reason.
type DeniedResult = contracts.ExecDeniedResult

// Reasons of denied events that no policy gave.
const (
	// ReasonTimeout: nobody decided before the approval expired.
	ReasonTimeout = contracts.ExecReasonTimeout
	// ReasonApprover: an approver denied the command (their reason, if
	// any, follows).
	ReasonApprover = contracts.ExecReasonApprover
)

// ApprovedResult is the result of an exec job's approved event.
type ApprovedResult = contracts.ExecApprovedResult

// NoticeResult is the result of the one running_notice event of an
// approved command that runs past approvalRunningNoticeMs.
type NoticeResult = contracts.ExecNoticeResult

// BackgroundResult is the completed result of an exec job with background
// set, or one whose command ran past its yieldMs: the command runs on as a
// session whose events (running, progress with its output, then completed
// with a shell.Result or failed) are those of job SessionID in the same
// session.
type BackgroundResult = contracts.ExecBackgroundResult

// OutputChunk is the result of a background session's progress event.
type OutputChunk = contracts.ExecOutputChunk

// DecideInput is the input of an exec.decide job.
type DecideInput = contracts.ExecDecideInput

// DecideResult is the completed result of an exec.decide job.
type DecideResult = contracts.ExecDecideResult

// ApprovalID is the id of the approval an exec job parks with: the job's
// own id, so `toolq approve <job id>` works and a redelivered job finds the
// approval it already made.
func ApprovalID(jobID string) string { return contracts.ExecApprovalID(jobID) }

// SessionID is the id of the background session an exec job starts: the
// job id of the session's events, derived from the exec job's id.
func SessionID(jobID string) string { return contracts.ExecSessionID(jobID) }
