package provider

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Kind classifies a provider failure. It decides whether the failure is
// retried, whether it counts against the provider's breaker and whether a
// job fails over to another provider.
type Kind string

// Kinds of failure.
const (
	// KindAuth is a 401 or 403: the credentials are wrong. Permanent.
	KindAuth Kind = "auth"
	// KindBadRequest is any other 4xx but 429: the request was refused.
	// Permanent.
	KindBadRequest Kind = "bad_request"
	// KindRateLimited is a 429. Retried, honouring Retry-After; not a fault.
	KindRateLimited Kind = "rate_limited"
	// KindServer is a 5xx (or Anthropic's 529). Retried; a fault.
	KindServer Kind = "server"
	// KindTransport is a timeout, refused or dropped connection. Retried; a
	// fault.
	KindTransport Kind = "transport"
	// KindMalformed is a 2xx whose body is not the expected JSON. A fault,
	// not retried within the provider (the job may fail over).
	KindMalformed Kind = "malformed"
	// KindNoAnswer is a well-formed response without answer text. Permanent.
	KindNoAnswer Kind = "no_answer"
	// KindCancelled is the caller's context ending. Neither a fault nor
	// retried.
	KindCancelled Kind = "cancelled"
)

// NoAnswerMessage is the message of a KindNoAnswer error (the code_execution contract).
const NoAnswerMessage = "no answer text returned; try a simpler request"

// Error is a failed provider call.
type Error struct {
	Provider string
	Kind     Kind
	// Status is the HTTP status, 0 when there was no response.
	Status int
	// RetryAfter is the server's Retry-After, 0 when absent.
	RetryAfter time.Duration
	// Message is a short description, safe to show (no secrets).
	Message string
	// Err is the underlying error, if any.
	Err error
}

func (e *Error) Error() string {
	s := e.Provider + ": " + string(e.Kind)
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, provider.ErrRateLimited) match any *Error of the
// same kind.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Provider == "" && t.Kind == e.Kind
}

// Retryable reports whether the same request may succeed if sent again.
func (e *Error) Retryable() bool {
	switch e.Kind {
	case KindRateLimited, KindServer, KindTransport:
		return true
	}
	return false
}

// Fault reports whether the failure is the provider's fault and counts
// against its breaker: 5xx, transport failures, malformed bodies. 4xx,
// 429 and cancellations are not.
func (e *Error) Fault() bool {
	switch e.Kind {
	case KindServer, KindTransport, KindMalformed:
		return true
	}
	return false
}

// Sentinels, one per kind, for errors.Is.
var (
	ErrAuth        = &Error{Kind: KindAuth}
	ErrBadRequest  = &Error{Kind: KindBadRequest}
	ErrRateLimited = &Error{Kind: KindRateLimited}
	ErrServer      = &Error{Kind: KindServer}
	ErrTransport   = &Error{Kind: KindTransport}
	ErrMalformed   = &Error{Kind: KindMalformed}
	ErrNoAnswer    = &Error{Kind: KindNoAnswer}
	ErrCancelled   = &Error{Kind: KindCancelled}
)

// Malformed returns a KindMalformed error for provider p.
func Malformed(p string, format string, args ...any) *Error {
	return &Error{Provider: p, Kind: KindMalformed, Message: fmt.Sprintf(format, args...)}
}

// NoAnswer returns the KindNoAnswer error for provider p.
func NoAnswer(p string) *Error {
	return &Error{Provider: p, Kind: KindNoAnswer, Message: NoAnswerMessage}
}

// KindForStatus classifies a non-2xx HTTP status.
func KindForStatus(status int) Kind {
	switch {
	case status == 401 || status == 403:
		return KindAuth
	case status == 429:
		return KindRateLimited
	case status == 408:
		return KindTransport
	case status >= 500:
		return KindServer
	default:
		return KindBadRequest
	}
}

// FromContext returns the KindCancelled error when ctx is done, else nil.
func FromContext(ctx context.Context, p string) *Error {
	if err := ctx.Err(); err != nil {
		return &Error{Provider: p, Kind: KindCancelled, Message: context.Cause(ctx).Error(), Err: err}
	}
	return nil
}
