package contracts

import (
	"encoding/json"
	"errors"
	"fmt"
)

// ErrorCode is the machine-readable code carried by every failure that crosses
// the bus. The first six come from the code-mode specification; the rest are
// toolq's own.
type ErrorCode string

// Error codes.
const (
	CodeInvalidInput          ErrorCode = "invalid_input"
	CodeRuntimeUnavailable    ErrorCode = "runtime_unavailable"
	CodeTimeout               ErrorCode = "timeout"
	CodeOutputLimitExceeded   ErrorCode = "output_limit_exceeded"
	CodeSnapshotLimitExceeded ErrorCode = "snapshot_limit_exceeded"
	CodeInternalError         ErrorCode = "internal_error"
	CodeCancelled             ErrorCode = "cancelled"
	CodeProviderUnavailable   ErrorCode = "provider_unavailable"
	CodeProviderError         ErrorCode = "provider_error"
	CodeMissingCredentials    ErrorCode = "missing_credentials"
	CodeDenied                ErrorCode = "denied"
	// CodeGuestError is a code-mode run whose own code failed: it threw,
	// returned a value JSON cannot hold, or awaited a promise nothing
	// settles. The code-mode contract leaves such a result without a code;
	// the job's error carries this one, so a requester can tell the
	// guest's failure from toolq's (internal_error).
	CodeGuestError ErrorCode = "guest_error"
)

// ErrorCodes lists every code, in the order of the design document.
var ErrorCodes = []ErrorCode{
	CodeInvalidInput, CodeRuntimeUnavailable, CodeTimeout, CodeOutputLimitExceeded,
	CodeSnapshotLimitExceeded, CodeInternalError, CodeCancelled, CodeProviderUnavailable,
	CodeProviderError, CodeMissingCredentials, CodeDenied, CodeGuestError,
}

// Valid reports whether c is one of the known codes.
func (c ErrorCode) Valid() bool {
	for _, k := range ErrorCodes {
		if c == k {
			return true
		}
	}
	return false
}

// Error is the structured error of a failed job or tool call. It is both a Go
// error and the wire form of a failure.
type Error struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
	// Retryable marks a transient failure (timeouts, 429, 5xx, lost
	// connections). Only retryable errors are retried by a worker.
	Retryable bool `json:"retryable,omitempty"`
	// Details carries tool-specific structured data (for example the
	// missing-credentials payload of a provider).
	Details json.RawMessage `json:"details,omitempty"`
}

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	if e.Message == "" {
		return string(e.Code)
	}
	return string(e.Code) + ": " + e.Message
}

// Is makes errors.Is(err, contracts.ErrTimeout) match any *Error with the
// same code, whatever its message.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code
}

// Sentinels, one per code, for errors.Is.
var (
	ErrInvalidInput          = &Error{Code: CodeInvalidInput}
	ErrRuntimeUnavailable    = &Error{Code: CodeRuntimeUnavailable}
	ErrTimeout               = &Error{Code: CodeTimeout}
	ErrOutputLimitExceeded   = &Error{Code: CodeOutputLimitExceeded}
	ErrSnapshotLimitExceeded = &Error{Code: CodeSnapshotLimitExceeded}
	ErrInternal              = &Error{Code: CodeInternalError}
	ErrCancelled             = &Error{Code: CodeCancelled}
	ErrProviderUnavailable   = &Error{Code: CodeProviderUnavailable}
	ErrProviderError         = &Error{Code: CodeProviderError}
	ErrMissingCredentials    = &Error{Code: CodeMissingCredentials}
	ErrDenied                = &Error{Code: CodeDenied}
	ErrGuestError            = &Error{Code: CodeGuestError}
)

// AsError converts any error into an *Error: an *Error anywhere in the chain
// is returned as is, anything else becomes internal_error.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Code: CodeInternalError, Message: err.Error()}
}
