package contracts

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// ExecResult is the completed result of an exec job that ran its command
// in the foreground, and of a background session's completed event. A
// command that exits non-zero is a result, not a failure.
type ExecResult struct {
	ExitCode        int    `json:"exitCode"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdoutTruncated,omitempty"`
	StderrTruncated bool   `json:"stderrTruncated,omitempty"`
	DurationMs      int64  `json:"durationMs"`
	TimedOut        bool   `json:"timedOut,omitempty"`
	// Signal names the signal that ended the command, if one did.
	Signal string `json:"signal,omitempty"`
}

// ExecPendingResult is the result of an exec job's approval_pending event.
type ExecPendingResult struct {
	ApprovalID string `json:"approvalId"`
	// Tenant is the approval's tenant ("" for the default one), written by
	// the worker: an approver signs its decision with it.
	Tenant  string     `json:"tenant,omitempty"`
	Command string     `json:"command"`
	Argv    [][]string `json:"argv,omitempty"`
	Workdir string     `json:"workdir,omitempty"`
	// Env are the job's env overrides that will be set for the command.
	Env  map[string]string `json:"env,omitempty"`
	Host ExecHost          `json:"host"`
	// TimeoutMs bounds the run.
	TimeoutMs int64    `json:"timeoutMs"`
	Reason    string   `json:"reason,omitempty"`
	Misses    []string `json:"misses,omitempty"`
	// Unlisted are the binaries "approve --always" adds to the allowlist.
	Unlisted   []string  `json:"unlisted,omitempty"`
	Background bool      `json:"background,omitempty"`
	ExpiresAt  time.Time `json:"expiresAt"`
	Hash       string    `json:"hash"`
	// Script, Shell and Path complete the plan, so that an approver who
	// reads only this event (a tenant's, who cannot read the approvals
	// bucket) can check that the plan hashes to Hash before signing.
	Script string   `json:"script,omitempty"`
	Shell  string   `json:"shell,omitempty"`
	Path   []string `json:"path,omitempty"`
	// CreatedAt is when the approval was made.
	CreatedAt time.Time `json:"createdAt,omitzero"`
}

// Plan is the plan the pending approval binds, rebuilt from the event.
func (p *ExecPendingResult) Plan() ExecPlan {
	return ExecPlan{
		Command: p.Command, Script: p.Script, Shell: p.Shell, Argv: p.Argv, Workdir: p.Workdir,
		Env: p.Env, Path: p.Path, Host: p.Host, TimeoutMs: p.TimeoutMs,
	}
}

// ExecDeniedResult is the result of an exec job's denied event; its error
// has code denied and the same reason.
type ExecDeniedResult struct {
	Reason     string   `json:"reason"`
	Command    string   `json:"command,omitempty"`
	Misses     []string `json:"misses,omitempty"`
	ApprovalID string   `json:"approvalId,omitempty"`
	// Approver is the key of the person who denied it.
	Approver string `json:"approver,omitempty"`
}

// Reasons of denied exec events that no policy gave.
const (
	// ExecReasonTimeout: nobody decided before the approval expired.
	ExecReasonTimeout = "timeout"
	// ExecReasonApprover: an approver denied the command (their reason, if
	// any, follows).
	ExecReasonApprover = "denied by approver"
)

// ExecApprovedResult is the result of an exec job's approved event.
type ExecApprovedResult struct {
	ApprovalID string `json:"approvalId"`
	Approver   string `json:"approver"`
	Always     bool   `json:"always,omitempty"`
}

// ExecNoticeResult is the result of the one running_notice event of an
// approved command that runs past approvalRunningNoticeMs.
type ExecNoticeResult struct {
	ApprovalID string `json:"approvalId"`
	Command    string `json:"command"`
	ElapsedMs  int64  `json:"elapsedMs"`
}

// ExecBackgroundResult is the completed result of an exec job with
// background set, or one whose command ran past its yieldMs: the command
// runs on as a session whose events (running, progress with an
// ExecOutputChunk, then completed with an ExecResult, or failed) are those
// of job SessionID in the same session.
type ExecBackgroundResult struct {
	Status    string `json:"status"` // "running"
	SessionID string `json:"sessionId"`
	Command   string `json:"command"`
	// Yielded: a foreground command still running after the job's yieldMs
	// moved to the background.
	Yielded bool `json:"yielded,omitempty"`
}

// ExecOutputChunk is the result of a background session's progress event.
type ExecOutputChunk struct {
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
	// Truncated: the stream cap was reached and later output is not
	// streamed (the final result keeps the first bytes up to its own cap).
	Truncated bool `json:"truncated,omitempty"`
}

// ExecApprovalID is the id of the approval an exec job parks with: the
// job's own id, so approving a job by its id works and a redelivered job
// finds the approval it already made.
func ExecApprovalID(jobID string) string { return jobID }

// ExecSessionID is the id of the background session an exec job starts:
// the job id of the session's events, derived from the exec job's id.
func ExecSessionID(jobID string) string {
	const suffix = "-bg"
	if len(jobID)+len(suffix) <= MaxIDLength {
		return jobID + suffix
	}
	sum := sha256.Sum256([]byte(jobID))
	return hex.EncodeToString(sum[:]) + suffix
}
