package operator

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// RequeueJob puts a job back at the level its dead letter names, normal
// without one, and refuses a record naming no level it knows.
func TestRequeueJobKeepsPriority(t *testing.T) {
	t.Parallel()
	body, err := json.Marshal(&contracts.Job{ID: "j1", Tool: "noop", Session: "s1"})
	require.NoError(t, err)
	dl := func(p contracts.Priority) *DeadLetter {
		return &DeadLetter{Seq: 7, DL: contracts.DeadLetter{Job: body, JobID: "j1", Tool: "noop", Session: "s1", Priority: p}}
	}
	for p, want := range map[contracts.Priority]contracts.Priority{
		"": contracts.PriorityNormal, contracts.PriorityHigh: contracts.PriorityHigh, contracts.PriorityLow: contracts.PriorityLow,
	} {
		job, err := RequeueJob(dl(p))
		require.NoError(t, err, p)
		require.Equal(t, want, job.Priority, p)
		require.Equal(t, "toolq.jobs."+map[contracts.Priority]string{
			contracts.PriorityNormal: "", contracts.PriorityHigh: "~high.", contracts.PriorityLow: "~low.",
		}[want]+"noop", contracts.Subjects{}.TenantJobAt(job.Tenant, job.Tool, job.Priority))
	}
	_, err = RequeueJob(dl("urgent"))
	require.ErrorContains(t, err, `dead letter 7: invalid_input: priority "urgent" is not one of high, normal, low`)
}
