package contracts

import "strings"

// DefaultPrefix is the subject prefix of a toolq deployment.
const DefaultPrefix = "toolq"

// Subjects builds every subject and stream name of one deployment. The zero
// value uses DefaultPrefix.
type Subjects struct {
	// Prefix is the first subject token, "toolq" by default. Stream names are
	// its upper-case form ("TOOLQ_JOBS"), bucket names its lower-case form.
	Prefix string
}

func (s Subjects) p() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

// JobsStream is the work-queue stream of jobs.
func (s Subjects) JobsStream() string { return strings.ToUpper(s.p()) + "_JOBS" }

// EventsStream is the limits stream of job events.
func (s Subjects) EventsStream() string { return strings.ToUpper(s.p()) + "_EVENTS" }

// DLQStream is the stream of jobs that exhausted their attempts.
func (s Subjects) DLQStream() string { return strings.ToUpper(s.p()) + "_DLQ" }

// Bucket returns the name of a KV bucket or object store, e.g. Bucket("runs")
// is "toolq_runs".
func (s Subjects) Bucket(name string) string { return strings.ToLower(s.p()) + "_" + name }

// Job is the subject a job for tool is published on: <prefix>.jobs.<tool>.
func (s Subjects) Job(tool string) string { return s.p() + ".jobs." + tool }

// Jobs is the wildcard of every job subject.
func (s Subjects) Jobs() string { return s.p() + ".jobs.>" }

// Schedules is the wildcard of NATS-native schedule subjects (in the jobs stream).
func (s Subjects) Schedules() string { return s.p() + ".schedules.>" }

// Schedule is the subject of one NATS-native schedule.
func (s Subjects) Schedule(id string) string { return s.p() + ".schedules." + id }

// Event is the subject of an event of job jobID in session: <prefix>.events.<session>.<job>.
func (s Subjects) Event(session, jobID string) string {
	return s.p() + ".events." + session + "." + jobID
}

// SessionEvents is the wildcard of every event of one session.
func (s Subjects) SessionEvents(session string) string { return s.p() + ".events." + session + ".*" }

// Events is the wildcard of every event subject.
func (s Subjects) Events() string { return s.p() + ".events.>" }

// DLQ is the dead-letter subject of tool.
func (s Subjects) DLQ(tool string) string { return s.p() + ".dlq." + tool }

// DLQs is the wildcard of every dead-letter subject.
func (s Subjects) DLQs() string { return s.p() + ".dlq.>" }

// Cancel is the core-NATS subject that cancels job jobID.
func (s Subjects) Cancel(jobID string) string { return s.p() + ".cancel." + jobID }

// Cancels is the wildcard of every cancel subject.
func (s Subjects) Cancels() string { return s.p() + ".cancel.*" }

// ToolOf returns the tool of a job subject, or "" when subject is not one
// (including a wildcard such as <prefix>.jobs.> and anything whose remainder
// is not a valid tool name, since callers build other subjects from it).
func (s Subjects) ToolOf(subject string) string {
	tool, ok := strings.CutPrefix(subject, s.p()+".jobs.")
	if !ok || !ValidTool(tool) {
		return ""
	}
	return tool
}

// ConsumerName is the durable consumer shared by every worker of tool.
// Dots are not allowed in consumer names; they become ":", which no tool
// name contains, so two tools never share a consumer.
func (s Subjects) ConsumerName(tool string) string {
	return "worker_" + strings.ReplaceAll(tool, ".", ":")
}
