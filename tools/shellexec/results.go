package shellexec

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/shell"
)

// PendingResult is the result of an exec job's approval_pending event.
type PendingResult struct {
	ApprovalID string     `json:"approvalId"`
	Command    string     `json:"command"`
	Argv       [][]string `json:"argv,omitempty"`
	Workdir    string     `json:"workdir,omitempty"`
	Host       shell.Host `json:"host"`
	Reason     string     `json:"reason,omitempty"`
	Misses     []string   `json:"misses,omitempty"`
	// Unlisted are the binaries "approve --always" adds to the allowlist.
	Unlisted   []string  `json:"unlisted,omitempty"`
	Background bool      `json:"background,omitempty"`
	ExpiresAt  time.Time `json:"expiresAt"`
	Hash       string    `json:"hash"`
}

// DeniedResult is the result of an exec job's denied event; its error has
// code denied and the same reason.
type DeniedResult struct {
	Reason     string   `json:"reason"`
	Command    string   `json:"command,omitempty"`
	Misses     []string `json:"misses,omitempty"`
	ApprovalID string   `json:"approvalId,omitempty"`
	// Approver is the key of the person who denied it.
	Approver string `json:"approver,omitempty"`
}

// Reasons of denied events that no policy gave.
const (
	// ReasonTimeout: nobody decided before the approval expired.
	ReasonTimeout = "timeout"
	// ReasonApprover: an approver denied the command (their reason, if
	// any, follows).
	ReasonApprover = "denied by approver"
)

// ApprovedResult is the result of an exec job's approved event.
type ApprovedResult struct {
	ApprovalID string `json:"approvalId"`
	Approver   string `json:"approver"`
	Always     bool   `json:"always,omitempty"`
}

// NoticeResult is the result of the one running_notice event of an
// approved command that runs past approvalRunningNoticeMs.
type NoticeResult struct {
	ApprovalID string `json:"approvalId"`
	Command    string `json:"command"`
	ElapsedMs  int64  `json:"elapsedMs"`
}

// BackgroundResult is the completed result of an exec job with background
// set, or one whose command ran past its yieldMs: the command runs on as a
// session whose events (running, progress
// with its output, then completed with a shell.Result or failed) are those
// of job SessionID in the same session.
type BackgroundResult struct {
	Status    string `json:"status"` // "running"
	SessionID string `json:"sessionId"`
	Command   string `json:"command"`
	// Yielded: a foreground command still running after the job's yieldMs
	// moved to the background.
	Yielded bool `json:"yielded,omitempty"`
}

// OutputChunk is the result of a background session's progress event.
type OutputChunk struct {
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
	// Truncated: the stream cap was reached and later output is not
	// streamed (the final result keeps the first bytes up to its own cap).
	Truncated bool `json:"truncated,omitempty"`
}

// DecideInput is the input of an exec.decide job.
type DecideInput struct {
	Decision shell.ApprovalDecision `json:"decision"`
}

// DecideResult is the completed result of an exec.decide job.
type DecideResult struct {
	ApprovalID string `json:"approvalId"`
	// Applied is false when the approval had already been decided (a
	// second or replayed decision) or its job had ended.
	Applied bool `json:"applied"`
	// Status is the approval's status after this decision.
	Status string `json:"status"`
	// Job is the exec job's id and session.
	JobID   string `json:"jobId"`
	Session string `json:"session"`
}

// ApprovalID is the id of the approval an exec job parks with: the job's
// own id, so `toolq approve <job id>` works and a redelivered job finds the
// approval it already made.
func ApprovalID(jobID string) string { return jobID }

// SessionID is the id of the background session an exec job starts: the
// job id of the session's events, derived from the exec job's id.
func SessionID(jobID string) string {
	const suffix = "-bg"
	if len(jobID)+len(suffix) <= contracts.MaxIDLength {
		return jobID + suffix
	}
	sum := sha256.Sum256([]byte(jobID))
	return hex.EncodeToString(sum[:]) + suffix
}
