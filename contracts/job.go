package contracts

import (
	"bytes"
	"encoding/json"
	"time"
)

// Limits on fields of a job.
const (
	// MaxAttemptsLimit is the largest max_attempts a job may ask for.
	MaxAttemptsLimit = 100
	// MaxJobTimeout is the longest timeout_ms a job may ask for (24 h).
	MaxJobTimeout  = 24 * time.Hour
	maxMetaEntries = 32
	maxMetaBytes   = 256
)

// Job is a tool call to run. It is the JSON body of a message on
// <prefix>.jobs.<tool>; its ID is also the message's Nats-Msg-Id, so a
// retried submit of the same job is enqueued once.
type Job struct {
	// ID identifies the job; it becomes a subject token.
	ID string `json:"id"`
	// Tool names the tool to run; it must equal the tool of the subject.
	Tool string `json:"tool"`
	// Session scopes the job's events: <prefix>.events.<session>.<id>.
	Session string `json:"session"`
	// Input is the tool's argument, any JSON value.
	Input json.RawMessage `json:"input,omitempty"`
	// Parent is set on a nested call made by a run (a code-mode run); the
	// job's end is reported to the run's continuation tool.
	Parent *Parent `json:"parent,omitempty"`
	// TimeoutMs bounds one attempt; 0 means the tool's default.
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	// MaxAttempts overrides the tool's retry policy (capped by the worker); 0
	// means the tool's default.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Progress asks for intermediate events (running, progress); terminal
	// events are always published.
	Progress bool `json:"progress,omitempty"`
	// CreatedAt is when the producer made the job.
	CreatedAt time.Time `json:"created_at"`
	// Meta is free-form string metadata carried to the events.
	Meta map[string]string `json:"meta,omitempty"`
	// Concurrency, when set, caps the jobs of its key that run at once
	// across all workers (the tenant's key).
	Concurrency *ConcurrencyLimit `json:"concurrency,omitempty"`
	// Tenant is the tenant the job belongs to ("" for the default one). It
	// is never on the wire: a worker sets it from the subject the job
	// arrived on (Subjects.TenantOf), so a body cannot claim another tenant.
	Tenant string `json:"-"`
	// Priority is the job's level. Like Tenant it is never on the wire: a
	// worker sets it from the subject the job arrived on (TenantJobOf).
	Priority Priority `json:"-"`
}

// Parent links a nested tool call to the run that made it.
type Parent struct {
	RunID  string `json:"run_id"`
	CallID string `json:"call_id"`
	// Tool is the run's continuation: the tool whose job the worker
	// submits, with a ToolResult as input, when the nested job ends. Empty
	// in jobs of producers that predate the field; see Continuation.
	Tool string `json:"tool,omitempty"`
	// Token is the run's secret for this call (NewCallToken): the report
	// of the job's end echoes it, and the run takes a result only with the
	// token of the pending call, so a result cannot be forged by guessing
	// ids. Empty in jobs of runs suspended before tokens existed.
	Token string `json:"token,omitempty"`
}

// Continuation returns the tool the end of the nested job is reported to:
// Tool, or code mode's ToolCodeModeResult for a parent without one (jobs
// already queued by older producers during a rolling upgrade).
func (p *Parent) Continuation() string {
	if p.Tool != "" {
		return p.Tool
	}
	return ToolCodeModeResult
}

// Timeout returns the job's timeout, or def when the job sets none.
func (j *Job) Timeout(def time.Duration) time.Duration {
	if j.TimeoutMs > 0 {
		return time.Duration(j.TimeoutMs) * time.Millisecond
	}
	return def
}

// Validate checks every field that comes from outside. Its errors are
// *Error with code invalid_input.
func (j *Job) Validate() error {
	if err := ValidateID("job id", j.ID); err != nil {
		return err
	}
	if err := ValidateTool(j.Tool); err != nil {
		return err
	}
	if err := ValidateID("session", j.Session); err != nil {
		return err
	}
	if j.Parent != nil {
		if err := ValidateID("parent.run_id", j.Parent.RunID); err != nil {
			return err
		}
		if err := ValidateID("parent.call_id", j.Parent.CallID); err != nil {
			return err
		}
		if j.Parent.Tool != "" && !ValidTool(j.Parent.Tool) {
			return Errorf(CodeInvalidInput, "parent.tool %q is not a valid tool name", clip(j.Parent.Tool, 64))
		}
		if err := ValidateCallToken("parent.token", j.Parent.Token); err != nil {
			return err
		}
	}
	if j.Concurrency != nil {
		if err := j.Concurrency.Validate(); err != nil {
			return err
		}
	}
	if j.Priority != "" {
		if _, err := ParsePriority(string(j.Priority)); err != nil {
			return err
		}
	}
	if j.TimeoutMs < 0 || j.TimeoutMs > MaxJobTimeout.Milliseconds() {
		return Errorf(CodeInvalidInput, "timeout_ms %d out of range [0, %d]", j.TimeoutMs, MaxJobTimeout.Milliseconds())
	}
	if j.MaxAttempts < 0 || j.MaxAttempts > MaxAttemptsLimit {
		return Errorf(CodeInvalidInput, "max_attempts %d out of range [0, %d]", j.MaxAttempts, MaxAttemptsLimit)
	}
	if len(j.Meta) > maxMetaEntries {
		return Errorf(CodeInvalidInput, "meta has %d entries, at most %d allowed", len(j.Meta), maxMetaEntries)
	}
	for k, v := range j.Meta {
		if k == "" || len(k) > maxMetaBytes || len(v) > maxMetaBytes {
			return Errorf(CodeInvalidInput, "meta entries need a key of 1-%d bytes and a value of at most %d bytes", maxMetaBytes, maxMetaBytes)
		}
	}
	return nil
}

// DecodeJob parses and validates a job message body. Every failure is an
// *Error with code invalid_input; it never panics.
func DecodeJob(data []byte) (*Job, error) {
	var j Job
	if err := decodeObject(data, &j); err != nil {
		return nil, Errorf(CodeInvalidInput, "malformed job: %v", err)
	}
	if err := j.Validate(); err != nil {
		return nil, err
	}
	return &j, nil
}

// decodeObject decodes one JSON object and nothing after it but JSON
// whitespace. json.Unmarshal refuses trailing data and non-JSON spaces, and
// is much faster than a Decoder on this hot path.
func decodeObject(data []byte, v any) error {
	// Only JSON's own whitespace: bytes.TrimSpace would also drop Unicode
	// spaces (U+00A0, U+0085, …), which no JSON parser accepts.
	trimmed := bytes.TrimLeft(data, jsonSpace)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return errNotObject
	}
	return json.Unmarshal(data, v)
}

const jsonSpace = " \t\r\n"

type decodeError string

func (e decodeError) Error() string { return string(e) }

const (
	errNotObject = decodeError("not a JSON object")
	errTrailing  = decodeError("trailing data after the JSON object")
)

// DedupID is the Nats-Msg-Id a job message must carry: the id that the
// job's own fields give (today its ID). Producers publish with it and
// workers refuse a message whose header differs, so one job id cannot be
// enqueued twice past JetStream's duplicate check. Scoping ids (per
// tenant, say) changes this one function.
func DedupID(j *Job) string { return j.ID }
