package shell

import "errors"

// Reasons VerifyDecision refuses a decision. The bus layer ignores a
// refused decision (and may log it); none of them decides the approval.
var (
	// ErrUnsigned: the decision carries no signature or no approver key.
	ErrUnsigned = errors.New("shell: approval decision is not signed")
	// ErrBadSignature: the signature does not verify under the approver key.
	ErrBadSignature = errors.New("shell: approval decision signature does not verify")
	// ErrUnknownApprover: the key is not one of the trusted approvers.
	ErrUnknownApprover = errors.New("shell: approval decision is from an unknown approver")
	// ErrWrongApproval: the decision names another approval or another
	// command (hash): a replay or a decision for a different argv.
	ErrWrongApproval = errors.New("shell: approval decision is for a different approval")
	// ErrTamperedApproval: the approval record no longer matches its hash.
	ErrTamperedApproval = errors.New("shell: approval record does not match its hash")
	// ErrExpired: the approval expired before the decision, or the decision
	// was issued outside the approval's life.
	ErrExpired = errors.New("shell: approval expired")
	// ErrMalformedDecision: a field of the decision is invalid.
	ErrMalformedDecision = errors.New("shell: malformed approval decision")
)
