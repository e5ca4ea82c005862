package contracts

import (
	"encoding/json"
	"time"
)

// DeadLetter is the body of a message on <prefix>.dlq.<tool>: a job that
// exhausted its attempts or could not be read at all, with the last error.
type DeadLetter struct {
	// Job is the job message exactly as it was received.
	Job json.RawMessage `json:"job"`
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
}
