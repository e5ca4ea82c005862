package contracts

import (
	"encoding/json"
	"time"
)

// DeadLetter is the body of a message on <prefix>.dlq.<tool>: a job that
// exhausted its attempts or could not be read at all, with the last error.
type DeadLetter struct {
	// Job is the job message exactly as it was received: as JSON when it
	// is JSON, else as a JSON string. When the record would not fit a
	// message, Job is a string holding the message's first bytes and
	// JobTruncated is set; JobSize and JobSHA256 (hex) then identify the
	// whole message.
	Job          json.RawMessage `json:"job"`
	JobTruncated bool            `json:"job_truncated,omitempty"`
	JobSize      int             `json:"job_size,omitempty"`
	JobSHA256    string          `json:"job_sha256,omitempty"`
	// JobID and Session are set when the job could be decoded.
	JobID    string    `json:"job_id,omitempty"`
	Session  string    `json:"session,omitempty"`
	Tool     string    `json:"tool"`
	Attempts int       `json:"attempts"`
	Error    *Error    `json:"error"`
	Worker   string    `json:"worker"`
	Time     time.Time `json:"time"`
	// Tenant is the job's tenant, from the subject it arrived on; empty
	// for the default tenant.
	Tenant string `json:"tenant,omitempty"`
	// Priority is the job's level, from the subject it arrived on; empty
	// for normal. A requeue puts the job back at it.
	Priority Priority `json:"priority,omitempty"`
}
