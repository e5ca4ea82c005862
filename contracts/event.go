package contracts

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// Status is a state of a job's lifecycle.
type Status string

// Statuses of DESIGN.md's job lifecycle.
const (
	StatusQueued          Status = "queued"
	StatusRunning         Status = "running"
	StatusProgress        Status = "progress"
	StatusCompleted       Status = "completed"
	StatusFailed          Status = "failed"
	StatusCancelled       Status = "cancelled"
	StatusWaiting         Status = "waiting"
	StatusApprovalPending Status = "approval_pending"
	StatusApproved        Status = "approved"
	StatusDenied          Status = "denied"
	StatusRunningNotice   Status = "running_notice"
	// StatusThrottled says a delivered job waits before it runs (for a slot
	// of its concurrency key); its result is a ThrottledDetails. Published
	// once per attempt that waits, whether or not the job asked for
	// progress.
	StatusThrottled Status = "throttled"
)

// Statuses lists every status.
var Statuses = []Status{
	StatusQueued, StatusRunning, StatusProgress, StatusCompleted, StatusFailed, StatusCancelled,
	StatusWaiting, StatusApprovalPending, StatusApproved, StatusDenied, StatusRunningNotice, StatusThrottled,
}

// Valid reports whether s is a known status.
func (s Status) Valid() bool {
	for _, k := range Statuses {
		if s == k {
			return true
		}
	}
	return false
}

// Terminal reports whether s ends a job: nothing follows it.
func (s Status) Terminal() bool {
	switch s {
	case StatusCompleted, StatusFailed, StatusCancelled, StatusDenied:
		return true
	}
	return false
}

// Parked reports whether s ends a job's current step while it waits for
// something outside the worker: a code-mode run suspended on nested calls or
// an exec waiting for a person's approval.
func (s Status) Parked() bool { return s == StatusWaiting || s == StatusApprovalPending }

// EventTypePrefix prefixes the CloudEvents type of every job event.
const EventTypePrefix = "toolq.job."

// Event is a status change of a job, in CloudEvents 1.0 structured JSON mode.
// It is published on <prefix>.events.<session>.<job_id> with Nats-Msg-Id equal
// to its ID, so a redelivered job cannot emit a second copy.
type Event struct {
	SpecVersion     string    `json:"specversion"`
	Type            string    `json:"type"`
	Source          string    `json:"source"`
	ID              string    `json:"id"`
	Subject         string    `json:"subject"`
	Time            time.Time `json:"time"`
	DataContentType string    `json:"datacontenttype"`
	Data            EventData `json:"data"`
}

// EventData is the payload of an Event.
type EventData struct {
	JobID   string            `json:"job_id"`
	Session string            `json:"session"`
	Tool    string            `json:"tool"`
	Status  Status            `json:"status"`
	Attempt int               `json:"attempt,omitempty"`
	Result  json.RawMessage   `json:"result,omitempty"`
	Error   *Error            `json:"error,omitempty"`
	Parent  *Parent           `json:"parent,omitempty"`
	Meta    map[string]string `json:"meta,omitempty"`
	// Tenant is the job's tenant, kept off the wire like Job.Tenant: it
	// picks the subject the event is written to.
	Tenant string `json:"-"`
}

// EventID is the deterministic id of the n-th event of status for jobID:
// "<job_id>/<status>/<n>".
func EventID(jobID string, status Status, n int) string {
	return jobID + "/" + string(status) + "/" + strconv.Itoa(n)
}

// NewEvent builds the event of job j reaching status; n numbers repeated
// events of the same status (1 for terminal events).
func NewEvent(source string, j *Job, status Status, n int, now time.Time) *Event {
	return &Event{
		SpecVersion:     "1.0",
		Type:            EventTypePrefix + string(status),
		Source:          source,
		ID:              EventID(j.ID, status, n),
		Subject:         j.ID,
		Time:            now.UTC(),
		DataContentType: "application/json",
		Data: EventData{
			JobID:   j.ID,
			Session: j.Session,
			Tool:    j.Tool,
			Status:  status,
			Parent:  j.Parent,
			Meta:    j.Meta,
			Tenant:  j.Tenant,
		},
	}
}

// Validate checks an event that came from outside.
func (e *Event) Validate() error {
	if e.SpecVersion != "1.0" {
		return Errorf(CodeInvalidInput, "event specversion %q, want 1.0", e.SpecVersion)
	}
	if e.ID == "" || e.Source == "" {
		return Errorf(CodeInvalidInput, "event needs id and source")
	}
	if !e.Data.Status.Valid() {
		return Errorf(CodeInvalidInput, "event status %q is unknown", e.Data.Status)
	}
	if e.Type != EventTypePrefix+string(e.Data.Status) {
		return Errorf(CodeInvalidInput, "event type %q does not match status %q", e.Type, e.Data.Status)
	}
	if err := ValidateID("event job_id", e.Data.JobID); err != nil {
		return err
	}
	if err := ValidateID("event session", e.Data.Session); err != nil {
		return err
	}
	// The tool is empty only on a cancel of a job no earlier event named.
	if e.Data.Tool != "" {
		if err := ValidateTool(e.Data.Tool); err != nil {
			return err
		}
	}
	if p := e.Data.Parent; p != nil {
		if err := ValidateID("event parent.run_id", p.RunID); err != nil {
			return err
		}
		if err := ValidateID("event parent.call_id", p.CallID); err != nil {
			return err
		}
		if p.Tool != "" && !ValidTool(p.Tool) {
			return Errorf(CodeInvalidInput, "event parent.tool %q is not a valid tool name", clip(p.Tool, 64))
		}
		if err := ValidateCallToken("event parent.token", p.Token); err != nil {
			return err
		}
	}
	if e.Data.Error != nil && !e.Data.Error.Code.Valid() {
		return Errorf(CodeInvalidInput, "event error code %q is unknown", e.Data.Error.Code)
	}
	return nil
}

// DecodeEvent parses and validates an event message body. Every failure is an
// *Error with code invalid_input; it never panics.
func DecodeEvent(data []byte) (*Event, error) {
	var e Event
	if err := decodeObject(data, &e); err != nil {
		return nil, Errorf(CodeInvalidInput, "malformed event: %v", err)
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return &e, nil
}

// EncodeEvent is the one encoder of event message bodies: it always returns
// valid JSON in valid UTF-8. encoding/json copies a json.RawMessage (a
// result, an error's details) byte for byte, so bytes that are not UTF-8
// would reach every reader; in valid JSON such bytes can only sit inside
// strings, where each is replaced with U+FFFD.
func EncodeEvent(e *Event) ([]byte, error) {
	data, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(data) {
		data = bytes.ToValidUTF8(data, []byte("\uFFFD"))
	}
	return data, nil
}
