package contracts_test

import (
	"encoding/json"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

func TestStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s                       contracts.Status
		valid, terminal, parked bool
	}{
		{contracts.StatusQueued, true, false, false},
		{contracts.StatusRunning, true, false, false},
		{contracts.StatusProgress, true, false, false},
		{contracts.StatusCompleted, true, true, false},
		{contracts.StatusFailed, true, true, false},
		{contracts.StatusCancelled, true, true, false},
		{contracts.StatusWaiting, true, false, true},
		{contracts.StatusApprovalPending, true, false, true},
		{contracts.StatusApproved, true, false, false},
		{contracts.StatusDenied, true, true, false},
		{contracts.StatusRunningNotice, true, false, false},
		{contracts.StatusThrottled, true, false, false},
		{"", false, false, false},
		{"Completed", false, false, false},
		{"done", false, false, false},
	} {
		require.Equal(t, tc.valid, tc.s.Valid(), "%q.Valid", tc.s)
		require.Equal(t, tc.terminal, tc.s.Terminal(), "%q.Terminal", tc.s)
		require.Equal(t, tc.parked, tc.s.Parked(), "%q.Parked", tc.s)
		require.False(t, tc.s.Terminal() && tc.s.Parked(), "%q cannot be both", tc.s)
	}
	// The table covers every status.
	require.Len(t, contracts.Statuses, 12)
}

func TestEventID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		job    string
		status contracts.Status
		n      int
		want   string
	}{
		{"j1", contracts.StatusCompleted, 1, "j1/completed/1"},
		{"job_01-A", contracts.StatusProgress, 17, "job_01-A/progress/17"},
		{"j", contracts.StatusApprovalPending, 0, "j/approval_pending/0"},
	} {
		require.Equal(t, tc.want, contracts.EventID(tc.job, tc.status, tc.n))
	}
	// Distinct (status, n) pairs of a job give distinct ids, so the
	// duplicate window keeps exactly one copy of each.
	seen := map[string]bool{}
	for _, st := range contracts.Statuses {
		for n := range 12 {
			id := contracts.EventID("j1", st, n)
			require.False(t, seen[id], id)
			seen[id] = true
		}
	}
}

func TestNewEvent(t *testing.T) {
	t.Parallel()
	j := fullJob()
	now := time.Date(2025, 6, 7, 8, 9, 10, 11, time.FixedZone("", -5*3600))
	ev := contracts.NewEvent("/worker/w1", j, contracts.StatusWaiting, 2, now)
	require.Equal(t, "1.0", ev.SpecVersion)
	require.Equal(t, "toolq.job.waiting", ev.Type)
	require.Equal(t, "job_01-A/waiting/2", ev.ID)
	require.Equal(t, j.ID, ev.Subject)
	require.Equal(t, time.UTC, ev.Time.Location())
	require.True(t, now.Equal(ev.Time))
	require.Equal(t, contracts.EventData{
		JobID: j.ID, Session: j.Session, Tool: j.Tool, Status: contracts.StatusWaiting,
		Parent: j.Parent, Meta: j.Meta,
	}, ev.Data)
	require.NoError(t, ev.Validate())

	b, err := json.Marshal(ev)
	require.NoError(t, err)
	back, err := contracts.DecodeEvent(b)
	require.NoError(t, err)
	require.Equal(t, ev, back)
}

func TestEventValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		edit func(*contracts.Event)
		want string // in the error; "" when valid
	}{
		{"as built", func(*contracts.Event) {}, ""},
		{"no tool", func(e *contracts.Event) { e.Data.Tool = "" }, ""},
		{"specversion", func(e *contracts.Event) { e.SpecVersion = "1.1" }, "specversion"},
		{"no id", func(e *contracts.Event) { e.ID = "" }, "id and source"},
		{"no source", func(e *contracts.Event) { e.Source = "" }, "id and source"},
		{"unknown status", func(e *contracts.Event) { e.Data.Status, e.Type = "x", "toolq.job.x" }, "unknown"},
		{"type mismatch", func(e *contracts.Event) { e.Type = "toolq.job.failed" }, "does not match"},
		{"job id", func(e *contracts.Event) { e.Data.JobID = "j.1" }, "job_id"},
		{"session", func(e *contracts.Event) { e.Data.Session = ">" }, "session"},
		{"tool", func(e *contracts.Event) { e.Data.Tool = "exec.*" }, "tool"},
		{"parent run", func(e *contracts.Event) { e.Data.Parent = &contracts.Parent{RunID: "r*", CallID: "c"} }, "parent.run_id"},
		{"parent call", func(e *contracts.Event) { e.Data.Parent = &contracts.Parent{RunID: "r", CallID: ""} }, "parent.call_id"},
		{"error code", func(e *contracts.Event) { e.Data.Error = &contracts.Error{Code: "nope"} }, "error code"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev := contracts.NewEvent("/w", fullJob(), contracts.StatusCompleted, 1, time.Unix(0, 0))
			tc.edit(ev)
			err := ev.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			requireInvalidInput(t, err)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestJobTimeout(t *testing.T) {
	t.Parallel()
	j := &contracts.Job{}
	require.Equal(t, 7*time.Second, j.Timeout(7*time.Second))
	j.TimeoutMs = 1500
	require.Equal(t, 1500*time.Millisecond, j.Timeout(7*time.Second))
}

func TestEncodeEventRepairsUTF8(t *testing.T) {
	t.Parallel()
	j := &contracts.Job{ID: "j1", Session: "s1", Tool: "noop"}
	for _, result := range []string{"\"caf\xe9\"", "{\"k\xff\":[\"\xc3\x28\"]}", `"plain"`} {
		ev := contracts.NewEvent("/test", j, contracts.StatusCompleted, 1, time.Now())
		ev.Data.Result = json.RawMessage(result)
		ev.Data.Error = &contracts.Error{Code: contracts.CodeInternalError, Message: "x", Details: json.RawMessage(result)}
		data, err := contracts.EncodeEvent(ev)
		require.NoError(t, err)
		require.True(t, utf8.Valid(data), "%q", data)
		_, err = contracts.DecodeEvent(data)
		require.NoError(t, err)
	}
}
