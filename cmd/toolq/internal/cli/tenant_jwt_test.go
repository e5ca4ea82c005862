package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/internal/testutil"
)

// TestTenantJWT makes an operator and a tenant with the commands, runs a
// nats-server with the configuration made, pushes a second tenant to it,
// registers that tenant under its account key and submits a job as its
// agent: every step through the CLI.
func TestTenantJWT(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "operator")
	code, out, errOut := run(t, "--json", "tenant", "jwt", "init", "--dir", dir)
	require.Equal(t, 0, code, errOut)
	var setup struct {
		ServerConf string `json:"server_conf"`
		Toolq      string `json:"toolq_account"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &setup))
	require.True(t, nkeys.IsValidPublicAccountKey(setup.Toolq))
	code, _, errOut = run(t, "tenant", "jwt", "init", "--dir", dir)
	require.NotEqual(t, 0, code, "a second init over the same operator")
	require.Contains(t, errOut, "already has an operator")

	person, err := nkeys.CreateUser()
	require.NoError(t, err)
	personPub, err := person.PublicKey()
	require.NoError(t, err)
	code, out, errOut = run(t, "--log-level", "warn", "tenant", "jwt", "add", "ACME", "--dir", dir, "--approver", personPub)
	require.Equal(t, 0, code, errOut)
	acme := strings.TrimSpace(out)
	require.True(t, nkeys.IsValidPublicAccountKey(acme), out)
	_, err = os.Stat(filepath.Join(dir, "creds", "ACME-approver-"+personPub+".jwt"))
	require.NoError(t, err, "the approver's user JWT")
	code, _, errOut = run(t, "tenant", "jwt", "add", "OTHER", "--dir", dir, "--approver", acme)
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "not a public user nkey")
	for _, bad := range []string{"ACME", "TOOLQ", "a.b"} {
		code, _, errOut = run(t, "tenant", "jwt", "add", bad, "--dir", dir)
		require.NotEqual(t, 0, code, bad)
		require.Contains(t, errOut, "invalid_input", bad)
	}

	srv := testutil.StartServerProcess(t, filepath.Join(t.TempDir(), "js"), "-c", setup.ServerConf)
	creds := func(name string) string { return filepath.Join(dir, "creds", name) }
	code, out, errOut = run(t, "--nats", srv.URL(), "--creds", creds("sys.creds"), "--json",
		"tenant", "jwt", "add", "GLOBEX", "--dir", dir, "--push")
	require.Equal(t, 0, code, errOut)
	var added struct {
		Tenant, Stream string
		Pushed         bool
	}
	require.NoError(t, json.Unmarshal([]byte(out), &added))
	require.True(t, added.Pushed)
	require.Equal(t, "TOOLQ_TENANT_"+added.Tenant+"_JOBS", added.Stream)

	for _, tenant := range []string{acme, added.Tenant} {
		code, out, errOut = run(t, "--nats", srv.URL(), "--creds", creds("worker.creds"), "tenant", "register", tenant)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "TOOLQ_TENANT_"+tenant+"_JOBS")
	}
	code, out, errOut = run(t, "--nats", srv.URL(), "--creds", creds("worker.creds"), "--json", "tenant", "ls")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, acme)
	require.Contains(t, out, added.Tenant)

	// Each agent's job lands in its own tenant's stream.
	for _, name := range []string{"ACME", "GLOBEX"} {
		code, out, errOut = run(t, "--nats", srv.URL(), "--creds", creds(name+"-agent.creds"), "--tenant-account",
			"--json", "submit", "--tool", "noop", "--input", `{"from":"`+name+`"}`)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, `"id"`)
	}
	code, out, errOut = run(t, "--nats", srv.URL(), "--creds", creds("worker.creds"), "--json", "tenant", "ls")
	require.Equal(t, 0, code, errOut)
	var rows []struct {
		Name   string `json:"name"`
		Queued uint64 `json:"queued"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2)
	for _, r := range rows {
		require.Equal(t, uint64(1), r.Queued, r.Name)
	}
}
