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

// SchedulesStream is the stream of NATS-native schedule messages and their
// firings: the one stream with message schedules on, written only by the
// scheduler.
func (s Subjects) SchedulesStream() string { return strings.ToUpper(s.p()) + "_SCHEDULES" }

// bucket returns the name of a KV bucket or object store: bucket("runs") is
// "toolq_runs". Callers use the named methods below, so every bucket name
// is spelled once.
func (s Subjects) bucket(name string) string { return strings.ToLower(s.p()) + "_" + name }

// RunsBucket is the KV bucket of code-mode run records (<prefix>_runs).
func (s Subjects) RunsBucket() string { return s.bucket("runs") }

// SnapshotsBucket is the object store of code-mode VM snapshots too large
// for their run record (<prefix>_snapshots).
func (s Subjects) SnapshotsBucket() string { return s.bucket("snapshots") }

// CatalogBucket is the KV bucket of the tools code-mode runs can see
// (<prefix>_catalog), keyed by CatalogKey.
func (s Subjects) CatalogBucket() string { return s.bucket("catalog") }

// CancelsBucket is the KV bucket of cancelled job ids (<prefix>_cancels).
func (s Subjects) CancelsBucket() string { return s.bucket("cancels") }

// ApprovalsBucket is the KV bucket of exec approvals (<prefix>_approvals),
// holding an ExecApprovalRecord under each approval id.
func (s Subjects) ApprovalsBucket() string { return s.bucket("approvals") }

// ExecPolicyBucket is the KV bucket of the shared exec policy
// (<prefix>_exec_policy).
func (s Subjects) ExecPolicyBucket() string { return s.bucket("exec_policy") }

// SchedulesBucket is the KV bucket of schedule definitions
// (<prefix>_schedules).
func (s Subjects) SchedulesBucket() string { return s.bucket("schedules") }

// BreakersBucket is the KV bucket of the provider breakers' current state
// (<prefix>_breakers): one BreakerRecord per worker and provider under
// BreakerKey, rewritten by its worker within the bucket's TTL, so a dead
// worker's entries expire.
func (s Subjects) BreakersBucket() string { return s.bucket("breakers") }

// KVStream is the stream behind KV bucket: "KV_<bucket>". A bucket name
// already carries the prefix, so this and KVSubject need none.
func KVStream(bucket string) string { return "KV_" + bucket }

// KVSubject is the subject of key in KV bucket: "$KV.<bucket>.<key>". key
// may be a wildcard ("s1.*", ">"); an empty key gives the prefix every key's
// subject starts with.
func KVSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// MaxDeliveriesAdvisories is the wildcard of JetStream's advisories for a
// message of stream that reached its consumer's MaxDeliver; stream "*"
// gives every stream's.
func (s Subjects) MaxDeliveriesAdvisories(stream string) string {
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + stream + ".*"
}

// Job is the subject a job for tool is published on: <prefix>.jobs.<tool>.
func (s Subjects) Job(tool string) string { return s.p() + ".jobs." + tool }

// Jobs is the wildcard of every job subject.
func (s Subjects) Jobs() string { return s.p() + ".jobs.>" }

// Schedules is the wildcard of NATS-native schedule subjects (the schedules
// stream; the jobs stream of deployments made before it had them).
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

// Breaker is the core subject a worker publishes provider's breaker
// changes on (a toolq.provider.breaker_changed CloudEvent): the toolq
// account's, never a tenant's.
func (s Subjects) Breaker(provider string) string { return s.p() + ".system.breakers." + provider }

// Breakers matches every provider's Breaker subject.
func (s Subjects) Breakers() string { return s.p() + ".system.breakers.*" }

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
	tool, _ := s.TenantJobOf("", subject)
	return tool
}

// ConsumerName is the durable consumer shared by every worker of tool.
// Dots are not allowed in consumer names; they become ":", which no tool
// name contains, so two tools never share a consumer.
func (s Subjects) ConsumerName(tool string) string {
	return "worker_" + strings.ReplaceAll(tool, ".", ":")
}
