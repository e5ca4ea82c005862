package bench

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// benchTenantName is the tenant account of a run with Config.Tenants.
const benchTenantName = "BENCH"

// benchTenant is the server configuration of a run through a tenant's
// account: the TOOLQ account with a worker user and the exports of
// deploy/nats/tenants.conf, and one tenant whose agent imports its own
// subspace under the plain names, with the agent permissions of the
// shipped config.
type benchTenant struct {
	configFile string
	agent      nkeys.KeyPair
	agentPub   string
}

func newBenchTenant(dir string) (*benchTenant, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	t := &benchTenant{configFile: filepath.Join(dir, "bench-tenants.conf"), agent: kp, agentPub: pub}
	conf := fmt.Sprintf(benchConfig, pub, benchTenantName, benchTenantName, benchTenantName, benchTenantName, benchTenantName, benchTenantName)
	if err := os.WriteFile(t.configFile, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return t, nil
}

// workerAuth and agentAuth are the connection options of the worker and
// the tenant's agent; none for a run without tenants.
func (t *benchTenant) workerAuth() []nats.Option {
	if t == nil {
		return nil
	}
	return []nats.Option{nats.UserInfo("worker", benchWorkerPassword)}
}

func (t *benchTenant) agentAuth() []nats.Option {
	if t == nil {
		return nil
	}
	return []nats.Option{nats.Nkey(t.agentPub, t.agent.Sign)}
}

// benchWorkerPassword guards an in-process server that listens nowhere.
const benchWorkerPassword = "bench-worker"

// benchConfig has the subjects of deploy/nats/tenants.conf; the %s are the
// agent's public key and the tenant name.
const benchConfig = `
accounts {
  TOOLQ {
    jetstream = enabled
    users = [ { user = "worker", password = "` + benchWorkerPassword + `" } ]
    exports = [
      { service = "toolq.t.*.jobs.>", account_token_position = 3 }
      { service = "toolq.t.*.cancel.*", account_token_position = 3 }
      { service = "$KV.toolq_cancels.*.*", account_token_position = 3 }
      { service = "toolq.t.*.replay.*", account_token_position = 3, response_type = "stream" }
      { service = "$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.t.*.events.>", account_token_position = 8 }
      { stream = "toolq.t.*.events.>", account_token_position = 3 }
    ]
  }
  BENCH {
    users = [ { nkey = "%s", permissions = {
      publish = { allow = ["toolq.jobs.>", "toolq.cancel.*", "$KV.toolq_cancels.*", "toolq.replay.*", "$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.events.>", "_INBOX.>"],
                  deny = ["toolq.jobs.code_mode.result", "toolq.jobs.exec.decide", "$JS.EVENT.>"] }
      subscribe = { allow = ["_INBOX.>", "toolq.events.>"] }
    } } ]
    imports = [
      { service = { account = TOOLQ, subject = "toolq.t.%s.jobs.>" }, to = "toolq.jobs.>" }
      { service = { account = TOOLQ, subject = "toolq.t.%s.cancel.*" }, to = "toolq.cancel.*" }
      { service = { account = TOOLQ, subject = "$KV.toolq_cancels.%s.*" }, to = "$KV.toolq_cancels.*" }
      { service = { account = TOOLQ, subject = "toolq.t.%s.replay.*" }, to = "toolq.replay.*" }
      { service = { account = TOOLQ, subject = "$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.t.%s.events.>" }, to = "$JS.API.DIRECT.GET.TOOLQ_EVENTS.toolq.events.>" }
      { stream = { account = TOOLQ, subject = "toolq.t.%s.events.>" }, to = "toolq.events.>" }
    ]
  }
}
`
