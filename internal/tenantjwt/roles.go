package tenantjwt

import (
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/toolq/toolq/contracts"
)

// role is the permissions of one kind of user, as deploy/nats/tenants.conf
// writes them for the prefix toolq (TestRolesMatchTenantsConf keeps the
// two equal).
type role struct {
	pubAllow, pubDeny, subAllow []string
	// resp allows replies to requests the user received (allow_responses).
	resp *jwt.ResponsePermission
}

var (
	roleWorker = role{
		pubAllow: []string{"toolq.>", "$KV.>", "$O.>", "$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "_INBOX.>"},
		pubDeny:  []string{"toolq.jobs.exec.decide"},
		subAllow: []string{"toolq.>", "$JS.EVENT.ADVISORY.>", "_INBOX.>"},
		// A tenant's replay is answered with many messages on the
		// request's reply subject.
		resp: &jwt.ResponsePermission{MaxMsgs: -1, Expires: 2 * time.Minute},
	}
	roleScheduler = role{
		pubAllow: []string{
			"toolq.jobs.>", "toolq.schedules.>", "$KV.toolq_schedules.>",
			"$JS.API.INFO", "$JS.API.STREAM.INFO.TOOLQ_JOBS", "$JS.API.STREAM.INFO.TOOLQ_SCHEDULES",
			"$JS.API.STREAM.INFO.KV_toolq_schedules",
			"$JS.API.STREAM.CREATE.KV_toolq_schedules", "$JS.API.STREAM.UPDATE.KV_toolq_schedules",
			"$JS.API.DIRECT.GET.KV_toolq_schedules.>", "$JS.API.STREAM.MSG.GET.KV_toolq_schedules",
			"$JS.API.CONSUMER.CREATE.KV_toolq_schedules.>", "$JS.API.CONSUMER.DELETE.KV_toolq_schedules.>",
			"$JS.API.CONSUMER.CREATE.TOOLQ_SCHEDULES.scheduler_relay.>", "$JS.API.CONSUMER.INFO.TOOLQ_SCHEDULES.scheduler_relay",
			"$JS.API.CONSUMER.MSG.NEXT.TOOLQ_SCHEDULES.scheduler_relay", "$JS.ACK.TOOLQ_SCHEDULES.scheduler_relay.>",
			"$JS.API.STREAM.PURGE.TOOLQ_SCHEDULES", "$JS.FC.>", "_INBOX.>",
		},
		pubDeny:  []string{"toolq.jobs.exec.decide", "toolq.jobs.code_mode.result"},
		subAllow: []string{"_INBOX.>"},
	}
	roleApprover = role{
		pubAllow: []string{
			"toolq.jobs.exec.decide", "$JS.API.CONSUMER.INFO.TOOLQ_JOBS.worker_exec:decide",
			"$JS.API.INFO", "$JS.API.STREAM.INFO.KV_toolq_approvals", "$JS.API.DIRECT.GET.KV_toolq_approvals.>",
			"$JS.API.STREAM.MSG.GET.KV_toolq_approvals", "$JS.API.STREAM.INFO.TOOLQ_EVENTS",
			"$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.events.>",
			"$JS.API.CONSUMER.CREATE.TOOLQ_EVENTS.*.toolq.events.>", "$JS.API.CONSUMER.INFO.TOOLQ_EVENTS.>",
			"$JS.API.CONSUMER.DELETE.TOOLQ_EVENTS.>", "$JS.API.CONSUMER.MSG.NEXT.TOOLQ_EVENTS.>",
			"$JS.FC.>", "_INBOX.>",
		},
		pubDeny:  []string{"$KV.toolq_approvals.>", "$KV.toolq_exec_policy.>"},
		subAllow: []string{"_INBOX.>"},
	}
	roleTenantAgent = role{
		pubAllow: []string{
			"toolq.jobs.>", "toolq.cancel.*", "$KV.toolq_cancels.*", "$KV.toolq_catalog.client.>", "toolq.replay.*",
			"$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.events.>", "_INBOX.>",
		},
		pubDeny:  []string{"toolq.jobs.code_mode.result", "toolq.jobs.exec.decide", "$JS.EVENT.>"},
		subAllow: []string{"_INBOX.>", "toolq.events.>"},
	}
	roleTenantApprover = role{
		pubAllow: []string{"toolq.jobs.exec.decide", "$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.events.>", "_INBOX.>"},
		pubDeny:  []string{"$JS.EVENT.>"},
		subAllow: []string{"_INBOX.>", "toolq.events.>"},
	}
)

// permissions is r for the deployment's prefix: the subjects, buckets and
// streams named toolq… are renamed to the prefix's.
func (r role) permissions(s contracts.Subjects) jwt.Permissions {
	p := s.TenantRoot("")
	rn := strings.NewReplacer(
		"toolq.", p+".", "toolq_", strings.ToLower(p)+"_", "TOOLQ_", strings.ToUpper(p)+"_",
	)
	var perms jwt.Permissions
	for _, subj := range r.pubAllow {
		perms.Pub.Allow.Add(rn.Replace(subj))
	}
	for _, subj := range r.pubDeny {
		perms.Pub.Deny.Add(rn.Replace(subj))
	}
	for _, subj := range r.subAllow {
		perms.Sub.Allow.Add(rn.Replace(subj))
	}
	if r.resp != nil {
		resp := *r.resp
		perms.Resp = &resp
	}
	return perms
}
