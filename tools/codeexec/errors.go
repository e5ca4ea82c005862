package codeexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/codeexec/provider"
)

// Sentinels for provider failures, compared by kind, so that
// errors.Is(err, providers.ErrRateLimited) works on the *provider.Error a
// wire client returns. Handle itself returns *contracts.Error; the kind is
// then in its Details ("kind").
var (
	ErrAuth        = provider.ErrAuth
	ErrBadRequest  = provider.ErrBadRequest
	ErrRateLimited = provider.ErrRateLimited
	ErrServer      = provider.ErrServer
	ErrTransport   = provider.ErrTransport
	ErrMalformed   = provider.ErrMalformed
	ErrNoAnswer    = provider.ErrNoAnswer
)

// KindBreakerOpen is the kind in a failure's Details when the provider's
// breaker refused the call.
const KindBreakerOpen = "breaker_open"

// DocsPath is the docs reference of the missing-credentials payload.
const DocsPath = "docs/tools/code-execution"

// MissingCredentials is the structured payload of the code_execution contract, carried in the
// Details of a missing_credentials error.
type MissingCredentials = contracts.CodeExecutionMissingCredentials

var vendorNames = map[string]string{
	XAI:       "xAI",
	OpenAI:    "OpenAI",
	Gemini:    "Gemini",
	Anthropic: "Anthropic",
}

// missingCredentials returns the payload for provider p: the error code
// missing_<p>_api_key and a message naming every way to configure a key.
func missingCredentials(p string) MissingCredentials {
	envs := envKeys[p]
	quoted := make([]string, len(envs))
	for i, e := range envs {
		quoted[i] = "`" + e + "`"
	}
	return MissingCredentials{
		Error: "missing_" + p + "_api_key",
		Message: fmt.Sprintf("code_execution needs %s credentials. Set %s in the worker environment, or configure `providers.%s.apiKey` in the worker config.",
			vendorNames[p], strings.Join(quoted, " or "), p),
		Docs: DocsPath,
	}
}

func missingCredentialsError(p string) *contracts.Error {
	payload := missingCredentials(p)
	details, _ := json.Marshal(payload)
	return &contracts.Error{Code: contracts.CodeMissingCredentials, Message: payload.Message, Details: details}
}

// breakerOpenError is returned by a provider whose breaker refuses calls.
type breakerOpenError struct {
	provider, model string
	retryAfter      time.Duration
	cause           *provider.Error // the fault that last counted, if known
}

func (e *breakerOpenError) Error() string {
	s := fmt.Sprintf("%s: circuit breaker for model %s is open", e.provider, e.model)
	if e.cause != nil {
		s += "; last failure: " + e.cause.Error()
	}
	return s
}

// disabledError is returned for a provider disabled by configuration.
type disabledError struct{ provider string }

func (e *disabledError) Error() string {
	return e.provider + " is disabled by configuration"
}

// missingKeyError is returned for a provider without credentials.
type missingKeyError struct{ provider string }

func (e *missingKeyError) Error() string { return e.provider + ": missing API key" }

// failureDetails is the Details of a failed job other than missing
// credentials.
type failureDetails = contracts.CodeExecutionFailure

// FailoverStep records one provider a job tried before the one that
// answered (or before giving up).
type FailoverStep = contracts.CodeExecutionFailoverStep

// attemptError is what one provider's run ended with.
type attemptError struct {
	provider, model string
	attempts        int
	err             error
}

// kind names the failure class of err.
func kindOf(err error) string {
	var pe *provider.Error
	var be *breakerOpenError
	var de *disabledError
	var me *missingKeyError
	switch {
	case errors.As(err, &be):
		return KindBreakerOpen
	case errors.As(err, &de):
		return "disabled"
	case errors.As(err, &me):
		return "missing_credentials"
	case errors.As(err, &pe):
		return string(pe.Kind)
	}
	return "internal"
}

// failoverable reports whether a job may try its next provider after err:
// yes for faults, exhausted retries, an open breaker, bad credentials or a
// provider that is not configured; no for a refused request, an answer
// without text or the job's own context ending.
func failoverable(err error) bool {
	var pe *provider.Error
	if errors.As(err, &pe) {
		switch pe.Kind {
		case provider.KindBadRequest, provider.KindNoAnswer, provider.KindCancelled:
			return false
		}
		return true
	}
	return true
}

// toContract maps a provider's failure onto the job's *contracts.Error.
func toContract(ctx context.Context, a *attemptError, trail []FailoverStep) *contracts.Error {
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return withDetails(&contracts.Error{
				Code: contracts.CodeTimeout, Retryable: true,
				Message: fmt.Sprintf("code_execution did not finish before the job's deadline (%s, %d attempt(s))", a.provider, a.attempts),
			}, a, trail, 0, 0)
		}
		return withDetails(&contracts.Error{Code: contracts.CodeCancelled, Message: "code_execution was cancelled"}, a, trail, 0, 0)
	}
	var pe *provider.Error
	var be *breakerOpenError
	var de *disabledError
	var me *missingKeyError
	switch {
	case errors.As(a.err, &me):
		return missingCredentialsError(a.provider)
	case errors.As(a.err, &de):
		return withDetails(&contracts.Error{Code: contracts.CodeProviderUnavailable, Message: de.Error()}, a, trail, 0, 0)
	case errors.As(a.err, &be):
		status := 0
		if be.cause != nil {
			status = be.cause.Status
		}
		return withDetails(&contracts.Error{Code: contracts.CodeProviderUnavailable, Retryable: true, Message: be.Error()}, a, trail, be.retryAfter, status)
	case errors.As(a.err, &pe):
		e := &contracts.Error{Message: pe.Error()}
		switch pe.Kind {
		case provider.KindAuth:
			e.Code = contracts.CodeProviderError
			e.Message = fmt.Sprintf("%s rejected the credentials (HTTP %d): %s", a.provider, pe.Status, pe.Message)
		case provider.KindBadRequest:
			e.Code = contracts.CodeProviderError
		case provider.KindNoAnswer:
			e.Code = contracts.CodeProviderError
			e.Message = provider.NoAnswerMessage
		case provider.KindMalformed:
			e.Code = contracts.CodeProviderError
		case provider.KindRateLimited, provider.KindServer, provider.KindTransport:
			e.Code = contracts.CodeProviderUnavailable
			e.Retryable = true
		case provider.KindCancelled:
			e.Code = contracts.CodeCancelled
		default:
			e.Code = contracts.CodeProviderError
		}
		return withDetails(e, a, trail, pe.RetryAfter, pe.Status)
	}
	return withDetails(&contracts.Error{Code: contracts.CodeInternalError, Message: a.err.Error()}, a, trail, 0, 0)
}

func withDetails(e *contracts.Error, a *attemptError, trail []FailoverStep, retryAfter time.Duration, status int) *contracts.Error {
	d := failureDetails{
		Provider: a.provider, Model: a.model, Kind: kindOf(a.err), Status: status,
		Attempts: a.attempts, Failover: trail,
	}
	if retryAfter > 0 {
		d.RetryAfterMs = retryAfter.Milliseconds()
		if d.RetryAfterMs == 0 {
			d.RetryAfterMs = 1
		}
	}
	e.Details, _ = json.Marshal(d)
	return e
}

// RetryAfter returns how long a failed code_execution job asks to wait
// before it is tried again (the provider's Retry-After or the time until its
// breaker's half-open probe), or 0 when err says nothing about it. The
// worker can pass it to NakWithDelay.
func RetryAfter(err error) time.Duration {
	var ce *contracts.Error
	if !errors.As(err, &ce) || !ce.Retryable || len(ce.Details) == 0 {
		return 0
	}
	var d struct {
		RetryAfterMs int64 `json:"retryAfterMs"`
	}
	if json.Unmarshal(ce.Details, &d) != nil || d.RetryAfterMs <= 0 {
		return 0
	}
	return time.Duration(d.RetryAfterMs) * time.Millisecond
}
