package contracts

import "strings"

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

// TenantJobsStream is the work-queue stream of the jobs of every named
// tenant. It is not the jobs stream: it allows no message schedules, so a
// tenant can neither schedule into another subspace nor into the default
// tenant's jobs.
func (s Subjects) TenantJobsStream() string { return strings.ToUpper(s.p()) + "_TENANT_JOBS" }

// TenantJobs is the wildcard of every named tenant's job subjects:
// <prefix>.t.*.jobs.>.
func (s Subjects) TenantJobs() string { return s.tenant("*") + ".jobs.>" }

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

// TenantCancels is the wildcard of every named tenant's cancel subjects:
// <prefix>.t.*.cancel.*.
func (s Subjects) TenantCancels() string { return s.tenant("*") + ".cancel.*" }

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
