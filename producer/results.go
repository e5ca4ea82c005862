package producer

import (
	"encoding/json"
	"fmt"

	"github.com/toolq/toolq/contracts"
)

// DecodeResult decodes the result of ev into a T, for any tool whose result
// type the caller knows: contracts.CodeExecutionDetails for code_execution,
// contracts.ExecDecideResult for exec.decide, contracts.ExecPendingResult
// for an exec job's approval_pending event, and so on. An event without a
// result returns its error when it has one (a failed or cancelled job), and
// ErrNoResult otherwise.
func DecodeResult[T any](ev *contracts.Event) (*T, error) {
	if len(ev.Data.Result) == 0 || string(ev.Data.Result) == "null" {
		if ev.Data.Error != nil {
			return nil, ev.Data.Error
		}
		return nil, fmt.Errorf("%w: %s event of job %s", ErrNoResult, ev.Data.Status, ev.Data.JobID)
	}
	var v T
	if err := json.Unmarshal(ev.Data.Result, &v); err != nil {
		return nil, fmt.Errorf("producer: result of job %s: %w", ev.Data.JobID, err)
	}
	return &v, nil
}

// CodeModeResult reads the CodeModeResult of a code_mode.exec or
// code_mode.wait event. A completed or waiting event carries it as its
// result; a failed run leaves it in its error's Details. A failure outside
// the run — a deadline, a cancellation, an input the worker refused before
// running anything — becomes a failed result with that error's code and
// message. So every terminal or waiting event gives a result, and
// result.Err() tells a failed run apart. Other events return ErrNoResult.
func CodeModeResult(ev *contracts.Event) (*contracts.CodeModeResult, error) {
	switch ev.Data.Tool {
	case contracts.ToolCodeModeExec, contracts.ToolCodeModeWait, "":
	default:
		return nil, fmt.Errorf("%w: job %s is a %s job, not code mode", ErrNoResult, ev.Data.JobID, ev.Data.Tool)
	}
	switch ev.Data.Status {
	case contracts.StatusCompleted, contracts.StatusWaiting:
		return DecodeResult[contracts.CodeModeResult](ev)
	case contracts.StatusFailed, contracts.StatusCancelled:
		e := ev.Data.Error
		if e == nil {
			e = contracts.Errorf(contracts.CodeInternalError, "job %s %s without an error", ev.Data.JobID, ev.Data.Status)
		}
		var res contracts.CodeModeResult
		if len(e.Details) > 0 && json.Unmarshal(e.Details, &res) == nil && res.Status == contracts.CodeModeFailed {
			return &res, nil
		}
		return &contracts.CodeModeResult{Status: contracts.CodeModeFailed, Error: e.Message, Code: e.Code}, nil
	}
	return nil, fmt.Errorf("%w: %s event of job %s", ErrNoResult, ev.Data.Status, ev.Data.JobID)
}

// ExecResult reads the end of an exec job (or of its background session)
// from its terminal event: the command's ExecResult when it ran to its end,
// or — when it runs on as a background session (input background, or past
// its yieldMs) — an ExecBackgroundResult naming the session, whose own
// events end with the ExecResult. A failed, cancelled or denied job
// returns its error (code denied for a refused command; the denied event's
// ExecDeniedResult is there for DecodeResult). Other events return
// ErrNoResult.
func ExecResult(ev *contracts.Event) (*contracts.ExecResult, *contracts.ExecBackgroundResult, error) {
	switch ev.Data.Status {
	case contracts.StatusCompleted:
	case contracts.StatusFailed, contracts.StatusCancelled, contracts.StatusDenied:
		if ev.Data.Error != nil {
			return nil, nil, ev.Data.Error
		}
		return nil, nil, contracts.Errorf(contracts.CodeInternalError, "job %s %s without an error", ev.Data.JobID, ev.Data.Status)
	default:
		return nil, nil, fmt.Errorf("%w: %s event of job %s", ErrNoResult, ev.Data.Status, ev.Data.JobID)
	}
	var probe struct {
		SessionID string `json:"sessionId"`
	}
	if err := json.Unmarshal(ev.Data.Result, &probe); err != nil {
		return nil, nil, fmt.Errorf("producer: result of job %s: %w", ev.Data.JobID, err)
	}
	if probe.SessionID != "" {
		bg, err := DecodeResult[contracts.ExecBackgroundResult](ev)
		return nil, bg, err
	}
	res, err := DecodeResult[contracts.ExecResult](ev)
	return res, nil, err
}
