package contracts_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

func TestLaneOfIsStableAndSpread(t *testing.T) {
	t.Parallel()
	// Stable: fixed values, so a change of the hash (which would move
	// every session's queued jobs to another lane) fails here.
	got := map[string]int{}
	for _, s := range []string{"a", "b", "c", "d", "session-1", "session-2"} {
		got[s] = contracts.LaneOf(s)
	}
	require.Equal(t, map[string]int{"a": 0, "b": 1, "c": 2, "d": 3, "session-1": 1, "session-2": 0}, got)
	// Spread: 1,000 sessions fill every lane.
	count := make([]int, contracts.SessionLanes)
	for i := range 1000 {
		count[contracts.LaneOf(fmt.Sprintf("session-%d", i))]++
	}
	for lane, n := range count {
		require.Greater(t, n, 150, "lane %d", lane)
	}
}

func TestLaneSubjects(t *testing.T) {
	t.Parallel()
	s := contracts.Subjects{}
	require.Equal(t, "toolq.jobs.exec", s.JobLane("exec", contracts.PriorityNormal, 0))
	require.Equal(t, "toolq.jobs.~s2.code_mode.exec", s.JobLane("code_mode.exec", contracts.PriorityNormal, 2))
	require.Equal(t, "toolq.t.ACME.jobs.~high.~s3.exec", s.TenantJobLane("ACME", "exec", contracts.PriorityHigh, 3))
	require.Equal(t, "toolq.jobs.exec", s.JobLane("exec", contracts.PriorityNormal, contracts.SessionLanes))
	require.Equal(t, "worker_code_mode:exec~low~s1", s.ConsumerNameLane("code_mode.exec", contracts.PriorityLow, 1))
	require.Equal(t, "worker_exec", s.ConsumerNameLane("exec", contracts.PriorityNormal, 0))
	require.Len(t, s.TenantJobLanes("", "exec", contracts.PriorityLow), contracts.SessionLanes)

	for _, tc := range []struct {
		subject string
		tool    string
		prio    contracts.Priority
		lane    int
	}{
		{"toolq.jobs.exec", "exec", contracts.PriorityNormal, 0},
		{"toolq.jobs.~s1.exec", "exec", contracts.PriorityNormal, 1},
		{"toolq.jobs.~low.~s3.code_mode.exec", "code_mode.exec", contracts.PriorityLow, 3},
		{"toolq.jobs.~s4.exec", "", "", 0},
		{"toolq.jobs.~s0.exec", "", "", 0},
		{"toolq.jobs.~s12.exec", "", "", 0},
		{"toolq.jobs.~s1.~high.exec", "", "", 0},
		{"toolq.jobs.~s1.~s2.exec", "", "", 0},
		{"toolq.jobs.~s1", "", "", 0},
	} {
		tool, prio, lane := s.TenantJobLaneOf("", tc.subject)
		require.Equal(t, tc.tool, tool, tc.subject)
		require.Equal(t, tc.prio, prio, tc.subject)
		require.Equal(t, tc.lane, lane, tc.subject)
	}
	tool, prio, lane := s.TenantJobLaneOf("ACME", "toolq.t.ACME.jobs.~high.~s2.exec")
	require.Equal(t, []any{"exec", contracts.PriorityHigh, 2}, []any{tool, prio, lane})

	// A guarded tool stays on its plain subject, whatever the session.
	for _, session := range []string{"a", "b", "c", "d"} {
		require.Equal(t, "toolq.jobs.exec.decide", s.SessionJob(&contracts.Job{Tool: contracts.ToolExecDecide, Session: session}))
		require.Equal(t, s.JobLane("exec", "", contracts.LaneOf(session)), s.SessionJob(&contracts.Job{Tool: "exec", Session: session}))
	}
}
