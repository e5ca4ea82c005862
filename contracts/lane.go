package contracts

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// SessionLanes is the number of session lanes of every tool, tenant and
// level: a job goes on the lane its session hashes to (LaneOf), so the
// jobs of one session queue on one lane and a session's backlog delays
// only the sessions that share its lane (stochastic fair queuing; docs/
// RATIONALE.md, "Fairness between sessions"). Lane 0 is the plain subject,
// where every producer that knows no lanes submits.
const SessionLanes = 4

// laneMark opens the subject token of a lane other than 0:
// <prefix>.jobs[.~high|.~low].~s<lane>.<tool>. No tool token contains "~".
const laneMark = "~s"

// LaneOf is the lane of session: FNV-1a of the session modulo
// SessionLanes, the same for a session on every producer and every run.
func LaneOf(session string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(session))
	return int(h.Sum32() % SessionLanes)
}

// Guarded reports whether tool's subject is one a permission guards (the
// approvers' and agents' deny rules name toolq.jobs.exec.decide and
// toolq.jobs.code_mode.result): such a tool has the plain subject only, at
// normal priority and lane 0, so no level or lane subject is a way around
// the rule. Its workers register it NormalOnly.
func Guarded(tool string) bool {
	return tool == ToolExecDecide || tool == ToolCodeModeResult
}

// JobLane is the subject of a job for tool at level p on lane (JobAt for
// lane 0, and for a lane out of range).
func (s Subjects) JobLane(tool string, p Priority, lane int) string {
	return s.TenantJobLane("", tool, p, lane)
}

// TenantJobLane is TenantJobAt on lane.
func (s Subjects) TenantJobLane(tenant, tool string, p Priority, lane int) string {
	return s.tenant(tenant) + ".jobs." + p.token() + laneToken(lane) + tool
}

// TenantJobLanes lists the subjects of every lane of tool at level p, lane
// 0 first.
func (s Subjects) TenantJobLanes(tenant, tool string, p Priority) []string {
	out := make([]string, SessionLanes)
	for i := range out {
		out[i] = s.TenantJobLane(tenant, tool, p, i)
	}
	return out
}

// SessionJob is the subject a producer submits job on: its tool, level and
// its session's lane (lane 0 for a Guarded tool).
func (s Subjects) SessionJob(job *Job) string { return s.TenantSessionJob("", job) }

// TenantSessionJob is SessionJob in tenant's subspace (the toolq account's
// name of it).
func (s Subjects) TenantSessionJob(tenant string, job *Job) string {
	lane := 0
	if !Guarded(job.Tool) {
		lane = LaneOf(job.Session)
	}
	return s.TenantJobLane(tenant, job.Tool, job.Priority, lane)
}

// ConsumerNameLane is the durable consumer of tool's jobs at level p on
// lane: ConsumerNameAt for lane 0, with "~s<lane>" appended otherwise.
// Only workers that keep lanes apart (worker.Config.SessionLanes) make the
// consumers of lanes other than 0.
func (s Subjects) ConsumerNameLane(tool string, p Priority, lane int) string {
	if lane <= 0 || lane >= SessionLanes {
		return s.ConsumerNameAt(tool, p)
	}
	return s.ConsumerNameAt(tool, p) + laneMark + strconv.Itoa(lane)
}

func laneToken(lane int) string {
	if lane <= 0 || lane >= SessionLanes {
		return ""
	}
	return laneMark + strconv.Itoa(lane) + "."
}

// parseLane reads a lane token ("~s1".."~s3"); ok is false when tok is not
// one.
func parseLane(tok string) (int, bool) {
	n, found := strings.CutPrefix(tok, laneMark)
	if !found || len(n) != 1 {
		return 0, false
	}
	lane := int(n[0] - '0')
	if lane < 1 || lane >= SessionLanes {
		return 0, false
	}
	return lane, true
}
