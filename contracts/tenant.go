package contracts

import (
	"strings"
	"time"
)

// Tenants. A deployment serves one tenant, the default one, unless its NATS
// server gives each tenant an account of its own (deploy/nats/tenants.conf).
// A tenant's account imports its own subspace of the toolq account's
// subjects, <prefix>.t.<tenant>.…, under the plain names (<prefix>.jobs.…),
// and the server checks that the <tenant> token is the importing account's
// name: a client never names its tenant and cannot name another. Workers in
// the toolq account read the tenant of a job from the subject it arrived on,
// never from its body, and write its events under the same tenant.
//
// The default tenant is the empty string; its subjects are the plain ones,
// so a single-tenant deployment needs no configuration.

// tenantToken is the subject token that opens a tenant's subspace.
const tenantToken = "t"

// TenantRoot is the first tokens of every subject of tenant in the toolq
// account: <prefix> for the default tenant, <prefix>.t.<tenant> otherwise.
func (s Subjects) TenantRoot(tenant string) string { return s.tenant(tenant) }

func (s Subjects) tenant(tenant string) string {
	if tenant == "" {
		return s.p()
	}
	return s.p() + "." + tenantToken + "." + tenant
}

// TenantJobsStream is the work-queue stream of tenant's jobs,
// <PREFIX>_TENANT_<tenant>_JOBS: one stream per named tenant, so that
// JetStream's duplicate window (job ids are Nats-Msg-Ids) and the queue
// quota are the tenant's own. It allows no message schedules, so a tenant
// can schedule into no subject at all.
func (s Subjects) TenantJobsStream(tenant string) string {
	return strings.ToUpper(s.p()) + "_TENANT_" + tenant + "_JOBS"
}

// TenantJobs is the subjects of tenant's jobs: <prefix>.t.<tenant>.jobs.>.
func (s Subjects) TenantJobs(tenant string) string { return s.tenant(tenant) + ".jobs.>" }

// TenantsBucket is the KV bucket of the named tenants, keyed by name:
// `toolq tenant add` writes an entry, and workers serving tenants make and
// consume the tenant's jobs stream for each entry.
func (s Subjects) TenantsBucket() string { return s.bucket("tenants") }

// TenantRecord is a tenant's entry in the tenants bucket.
type TenantRecord struct {
	// Name is the tenant's NATS account name and its subject token.
	Name string `json:"name"`
	// QueueLimit caps the queued and running jobs of the tenant over all
	// tools; a submit past it is refused by the server. 0 takes the
	// workers' default.
	QueueLimit int64 `json:"queueLimit,omitempty"`
	// Approvers are the public nkeys (user "U…" or account "A…") whose
	// signed decisions approve or deny the tenant's exec commands. They are
	// the tenant's only approvers unless the workers also let their own
	// approvers decide for tenants.
	Approvers []string `json:"approvers,omitempty"`
	// Weight is the tenant's share of each worker's slots of a tool while
	// tenants contend for them, relative to the others' (1 to MaxTenantWeight;
	// 0 is 1). The default tenant's weight is 1.
	Weight int `json:"weight,omitempty"`
	// Added is when the entry was written.
	Added time.Time `json:"added"`
}

// MaxTenantWeight is the largest TenantRecord.Weight.
const MaxTenantWeight = 100

// TenantJob is the subject of a job for tool in tenant, as the toolq
// account sees it: Job(tool) for the default tenant, <prefix>.t.<tenant>.jobs.<tool>
// otherwise. tenant "*" gives the wildcard over every named tenant.
func (s Subjects) TenantJob(tenant, tool string) string { return s.tenant(tenant) + ".jobs." + tool }

// TenantEvent is the subject of an event of job jobID in session of tenant:
// Event(session, jobID) for the default tenant.
func (s Subjects) TenantEvent(tenant, session, jobID string) string {
	return s.tenant(tenant) + ".events." + session + "." + jobID
}

// TenantEvents is the wildcard of every named tenant's event subjects:
// <prefix>.t.*.events.>.
func (s Subjects) TenantEvents() string { return s.tenant("*") + ".events.>" }

// TenantCancel is the core subject that cancels tenant's job jobID, as the
// toolq account sees it: Cancel(jobID) for the default tenant.
func (s Subjects) TenantCancel(tenant, jobID string) string {
	return s.tenant(tenant) + ".cancel." + jobID
}

// TenantCancels is the wildcard of every named tenant's cancel subjects:
// <prefix>.t.*.cancel.*.
func (s Subjects) TenantCancels() string { return s.tenant("*") + ".cancel.*" }

// Replay is the subject a tenant's client asks on for the stored events of
// one session, <prefix>.replay.<session>: tenants have no JetStream of
// their own, so workers answer, each event as one message to the reply
// subject, then an empty message with the ReplayEndHeader.
func (s Subjects) Replay(session string) string { return s.p() + ".replay." + session }

// TenantReplays is the wildcard of every named tenant's replay requests in
// the toolq account: <prefix>.t.*.replay.*.
func (s Subjects) TenantReplays() string { return s.tenant("*") + ".replay.*" }

// Headers of a replay's last message.
const (
	// ReplayEndHeader ends a replay; its value is the number of events sent.
	ReplayEndHeader = "Toolq-Replay-End"
	// ReplayTruncatedHeader is set on the end when more events were stored
	// than one replay sends.
	ReplayTruncatedHeader = "Toolq-Replay-Truncated"
	// ReplayErrorHeader carries the reason a replay was refused or cut.
	ReplayErrorHeader = "Toolq-Replay-Error"
	// ReplayBusy starts the ReplayErrorHeader of a replay refused for want
	// of a free slot on the worker, before any event was sent: ask again.
	ReplayBusy = "busy"
	// ReplayStoredHeader is set on each replayed event: the server's time
	// of storing it (RFC 3339 with nanoseconds), where the next page of a
	// truncated replay starts (ReplayRequest.Since).
	ReplayStoredHeader = "Toolq-Replay-Stored"
)

// ReplayRequest is the optional body of a replay request.
type ReplayRequest struct {
	// JobID narrows the replay to one job's events.
	JobID string `json:"jobId,omitempty"`
	// Since starts the replay at the first event stored at or after it
	// (the server's time); zero replays from the first. A reader pages
	// through more events than one replay sends by asking again from
	// shortly before the newest it passed. A worker that predates the
	// field replays from the first.
	Since time.Time `json:"since,omitzero"`
}

// DecodeReplayRequest reads a replay request's body, which a tenant's
// client sends: empty for the whole session, else a JSON object. A field
// it does not know is passed over (a newer client's), a jobId must be a
// valid id. Errors are invalid_input.
func DecodeReplayRequest(data []byte) (*ReplayRequest, error) {
	var r ReplayRequest
	if len(data) == 0 {
		return &r, nil
	}
	if err := decodeObject(data, &r); err != nil {
		return nil, Errorf(CodeInvalidInput, "replay request is not a JSON object: %v", err)
	}
	if r.JobID != "" && !ValidID(r.JobID) {
		return nil, Errorf(CodeInvalidInput, "replay jobId is not a valid id")
	}
	return &r, nil
}

// TenantOf returns the tenant of a subject in the toolq account: the token
// after <prefix>.t., or "" (the default tenant) for a plain subject. It
// returns ok false for a subject of a tenant whose name is not a valid id.
func (s Subjects) TenantOf(subject string) (tenant string, ok bool) {
	rest, found := strings.CutPrefix(subject, s.p()+"."+tenantToken+".")
	if !found {
		return "", true
	}
	tenant, _, _ = strings.Cut(rest, ".")
	return tenant, ValidID(tenant)
}

// TenantKey scopes a job id to its tenant, for maps and KV keys shared by
// every tenant: the id itself for the default tenant, <tenant>.<id>
// otherwise (ids contain no dots, so the two never collide).
func TenantKey(tenant, jobID string) string {
	if tenant == "" {
		return jobID
	}
	return tenant + "." + jobID
}

// CancelKey is the key of a job's cancel mark in the cancels bucket:
// TenantKey(tenant, <session>/<job>). The session is part of the key, so a
// mark counts only for the job of that session: a cancel that names
// another session (or guesses an id before the job exists) marks a key no
// job of this session reads, and cannot overwrite this session's mark
// either. "/" is no id byte, so the key splits back unambiguously, and the
// session and job stay one subject token: a tenant's account writes
// $KV.<bucket>.<session>/<job>, which its import maps to
// <tenant>.<session>/<job>, the same one-token import as before.
func CancelKey(tenant, session, jobID string) string {
	return TenantKey(tenant, session+"/"+jobID)
}

// ParseCancelKey splits a CancelKey; ok is false for a key of any other
// shape (a bare job id, as marks were written before sessions were part of
// the key) or with an invalid id in it.
func ParseCancelKey(key string) (tenant, session, jobID string, ok bool) {
	rest := key
	if t, r, found := strings.Cut(key, "."); found {
		if !ValidID(t) {
			return "", "", "", false
		}
		tenant, rest = t, r
	}
	session, jobID, found := strings.Cut(rest, "/")
	if !found || !ValidID(session) || !ValidID(jobID) {
		return "", "", "", false
	}
	return tenant, session, jobID, true
}

// TenantToolOf returns the tool of a job subject of tenant in the toolq
// account, or "" when subject is not one: ToolOf for the default tenant.
func (s Subjects) TenantToolOf(tenant, subject string) string {
	tool, _ := s.TenantJobOf(tenant, subject)
	return tool
}
