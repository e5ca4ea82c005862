package contracts_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolq/toolq/contracts"
)

func ExampleSubjects() {
	s := contracts.Subjects{} // the zero value uses the "toolq" prefix
	fmt.Println(s.Job("code_mode.exec"))
	fmt.Println(s.Event("sess-1", "job-1"))
	fmt.Println(s.JobsStream(), s.RunsBucket())
	fmt.Println(s.ConsumerName("code_mode.exec"))
	fmt.Println(s.ToolOf("toolq.jobs.code_mode.exec"))

	acme := contracts.Subjects{Prefix: "acme"}
	fmt.Println(acme.DLQ("exec"), acme.EventsStream())
	// Output:
	// toolq.jobs.code_mode.exec
	// toolq.events.sess-1.job-1
	// TOOLQ_JOBS toolq_runs
	// worker_code_mode:exec
	// code_mode.exec
	// acme.dlq.exec ACME_EVENTS
}

func ExampleDecodeJob() {
	job, err := contracts.DecodeJob([]byte(`{
		"id": "job-1", "tool": "exec", "session": "sess-1",
		"input": {"command": "ls -l"}, "timeout_ms": 5000,
		"created_at": "2025-01-02T03:04:05Z", "added_in_a_later_version": true
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(job.ID, job.Tool, job.Session, string(job.Input), job.Timeout(time.Minute))

	_, err = contracts.DecodeJob([]byte(`{"id": "job.1", "tool": "exec", "session": "sess-1"}`))
	fmt.Println(errors.Is(err, contracts.ErrInvalidInput))
	fmt.Println(err)
	// Output:
	// job-1 exec sess-1 {"command": "ls -l"} 5s
	// true
	// invalid_input: job id "job.1" is not a valid id: want [A-Za-z0-9_-]{1,128}
}

func ExampleDecodeEvent() {
	ev, err := contracts.DecodeEvent([]byte(`{
		"specversion": "1.0", "type": "toolq.job.failed", "source": "/worker/w1",
		"id": "job-1/failed/1", "subject": "job-1", "time": "2025-01-02T03:04:05Z",
		"data": {"job_id": "job-1", "session": "sess-1", "tool": "code_execution", "status": "failed",
			"error": {"code": "provider_unavailable", "message": "xai: 503", "retryable": true}}
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ev.Data.Status, ev.Data.Status.Terminal())
	fmt.Println(errors.Is(ev.Data.Error, contracts.ErrProviderUnavailable), ev.Data.Error.Retryable)
	// Output:
	// failed true
	// true true
}

func ExampleNewEvent() {
	job := &contracts.Job{ID: "job-1", Tool: "exec", Session: "sess-1"}
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := contracts.NewEvent("/worker/w1", job, contracts.StatusApprovalPending, 1, now)
	b, _ := json.Marshal(ev)
	fmt.Println(string(b))
	fmt.Println(contracts.Subjects{}.Event(ev.Data.Session, ev.Data.JobID), ev.Data.Status.Parked())
	// Output:
	// {"specversion":"1.0","type":"toolq.job.approval_pending","source":"/worker/w1","id":"job-1/approval_pending/1","subject":"job-1","time":"2025-01-02T03:04:05Z","datacontenttype":"application/json","data":{"job_id":"job-1","session":"sess-1","tool":"exec","status":"approval_pending"}}
	// toolq.events.sess-1.job-1 true
}

func ExampleError_Is() {
	err := fmt.Errorf("worker: job job-1: %w", contracts.Errorf(contracts.CodeTimeout, "attempt took longer than 5s"))
	fmt.Println(errors.Is(err, contracts.ErrTimeout))
	fmt.Println(errors.Is(err, contracts.ErrCancelled))
	fmt.Println(contracts.AsError(err).Code)
	fmt.Println(contracts.AsError(errors.New("disk full")))
	// Output:
	// true
	// false
	// timeout
	// internal_error: disk full
}

func ExampleValidID() {
	for _, id := range []string{"sess-1", "a.b", "*", ""} {
		fmt.Println(id, contracts.ValidID(id))
	}
	fmt.Println(contracts.ValidTool("code_mode.exec"), contracts.ValidTool("code_mode.>"))
	// Output:
	// sess-1 true
	// a.b false
	// * false
	//  false
	// true false
}

func ExampleJobSchema() {
	var schema struct {
		Schema   string   `json:"$schema"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(contracts.JobSchema(), &schema); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(schema.Schema)
	fmt.Println(schema.Required)
	// Output:
	// https://json-schema.org/draft/2020-12/schema
	// [id tool session]
}
