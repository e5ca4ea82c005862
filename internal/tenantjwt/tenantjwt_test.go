package tenantjwt

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/conf"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// tenantsConf is deploy/nats/tenants.conf, parsed.
func tenantsConf(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "nats", "tenants.conf"))
	require.NoError(t, err)
	text := strings.NewReplacer("$TOOLQ_WORKER_PASSWORD", `"x"`, "$TOOLQ_SCHEDULER_PASSWORD", `"x"`).Replace(string(data))
	m, err := conf.Parse(text)
	require.NoError(t, err)
	return m
}

func strs(t *testing.T, v any) []string {
	t.Helper()
	if v == nil {
		return nil
	}
	list, ok := v.([]any)
	require.True(t, ok, "%T", v)
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, ok := x.(string)
		require.True(t, ok, "%T", x)
		out = append(out, s)
	}
	return out
}

func sub(t *testing.T, m any, key string) map[string]any {
	t.Helper()
	mm, ok := m.(map[string]any)
	require.True(t, ok, "%T", m)
	v, ok := mm[key].(map[string]any)
	require.True(t, ok, "%s: %T", key, mm[key])
	return v
}

// TestRolesMatchTenantsConf: the users made for operator mode have the
// permissions of the roles of deploy/nats/tenants.conf.
func TestRolesMatchTenantsConf(t *testing.T) {
	t.Parallel()
	m := tenantsConf(t)
	for name, r := range map[string]role{
		"TOOLQ_WORKER": roleWorker, "TOOLQ_SCHEDULER": roleScheduler,
		"TOOLQ_APPROVER": roleApprover, "TENANT_AGENT": roleTenantAgent, "TENANT_APPROVER": roleTenantApprover,
	} {
		pub, subs := sub(t, m[name], "publish"), sub(t, m[name], "subscribe")
		perms := r.permissions(contracts.Subjects{})
		require.ElementsMatch(t, strs(t, pub["allow"]), []string(perms.Pub.Allow), name)
		require.ElementsMatch(t, strs(t, pub["deny"]), []string(perms.Pub.Deny), name)
		require.ElementsMatch(t, strs(t, subs["allow"]), []string(perms.Sub.Allow), name)
		require.Empty(t, perms.Sub.Deny, name)
		resp, _ := m[name].(map[string]any)["allow_responses"].(map[string]any)
		if resp == nil {
			require.Nil(t, perms.Resp, name)
			continue
		}
		require.NotNil(t, perms.Resp, name)
		require.Equal(t, resp["max"], int64(perms.Resp.MaxMsgs), name)
		expires, ok := resp["expires"].(string)
		require.True(t, ok, name)
		d, err := time.ParseDuration(expires)
		require.NoError(t, err, name)
		require.Equal(t, d, perms.Resp.Expires, name)
	}
}

// TestSharesMatchTenantsConf: the toolq account's exports and a tenant's
// imports are those of deploy/nats/tenants.conf, with the account key
// where the config has the account name.
func TestSharesMatchTenantsConf(t *testing.T) {
	t.Parallel()
	m := tenantsConf(t)
	accounts := sub(t, m, "accounts")
	type export struct {
		kind, subject, resp string
		pos                 uint
	}
	var want []export
	exports, ok := sub(t, accounts, "TOOLQ")["exports"].([]any)
	require.True(t, ok)
	for _, e := range exports {
		em, ok := e.(map[string]any)
		require.True(t, ok)
		pos, ok := em["account_token_position"].(int64)
		require.True(t, ok)
		for _, kind := range []string{"service", "stream"} {
			if s, ok := em[kind].(string); ok {
				resp, _ := em["response_type"].(string)
				if resp == "" && kind == "service" {
					resp = string(jwt.ResponseTypeSingleton)
				}
				want = append(want, export{kind, s, strings.ToLower(resp), uint(pos)}) //nolint:gosec // G115: a small position
			}
		}
	}
	var got []export
	for _, e := range toolqAccount(contracts.Subjects{}, "A").Exports {
		resp := e.ResponseType
		if resp == "" && e.IsService() {
			resp = jwt.ResponseTypeSingleton
		}
		got = append(got, export{e.Type.String(), string(e.Subject), strings.ToLower(string(resp)), e.AccountTokenPosition})
	}
	require.ElementsMatch(t, want, got)

	type imp struct{ kind, subject, local string }
	var wantImp []imp
	imports, ok := sub(t, accounts, "ACME")["imports"].([]any)
	require.True(t, ok)
	for _, i := range imports {
		im, ok := i.(map[string]any)
		require.True(t, ok)
		for _, kind := range []string{"service", "stream"} {
			if from, ok := im[kind].(map[string]any); ok {
				require.Equal(t, "TOOLQ", from["account"])
				subj, _ := from["subject"].(string)
				to, _ := im["to"].(string)
				wantImp = append(wantImp, imp{kind, subj, to})
			}
		}
	}
	var gotImp []imp
	for _, i := range TenantAccount(contracts.Subjects{}, "ACME", "ACME").Imports {
		gotImp = append(gotImp, imp{i.Type.String(), string(i.Subject), string(i.LocalSubject)})
	}
	require.ElementsMatch(t, wantImp, gotImp)
}

func TestInitAndAddTenant(t *testing.T) {
	t.Parallel()
	cfg := &Config{Dir: filepath.Join(t.TempDir(), "op")}
	setup, err := Init(cfg)
	require.NoError(t, err)
	require.True(t, nkeys.IsValidPublicOperatorKey(setup.Operator))
	require.True(t, nkeys.IsValidPublicAccountKey(setup.Toolq))
	_, err = Init(cfg)
	require.ErrorIs(t, err, contracts.ErrInvalidInput, "%v", err)

	person, err := nkeys.CreateUser()
	require.NoError(t, err)
	personPub, err := person.PublicKey()
	require.NoError(t, err)
	_, err = AddTenant(cfg, "BADAPPROVER", &AddOpts{Approvers: []string{setup.Toolq}})
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
	tn, err := AddTenant(cfg, "ACME", &AddOpts{Approvers: []string{personPub}})
	require.NoError(t, err)
	require.Len(t, tn.Approvers, 1)
	ajwt, err := os.ReadFile(tn.Approvers[0])
	require.NoError(t, err)
	uc, err := jwt.DecodeUserClaims(string(ajwt))
	require.NoError(t, err)
	require.Equal(t, personPub, uc.Subject)
	require.Equal(t, tn.Account, uc.Issuer, "the approver is a user of the tenant's account")
	require.Equal(t, roleTenantApprover.permissions(cfg.Subjects), uc.Permissions)
	require.True(t, nkeys.IsValidPublicAccountKey(tn.Account))
	ac, err := jwt.DecodeAccountClaims(tn.JWT)
	require.NoError(t, err)
	require.Equal(t, "ACME", ac.Name)
	require.Zero(t, ac.Limits.DiskStorage, "tenants have no JetStream")
	for _, im := range ac.Imports {
		require.Equal(t, setup.Toolq, im.Account)
		require.Contains(t, string(im.Subject), "."+tn.Account+".")
	}
	vr := jwt.CreateValidationResults()
	ac.Validate(vr)
	require.Empty(t, vr.Errors())

	require.NoError(t, CheckImports(cfg.Subjects, ac))
	// An account that imports another's subspace, or anything else, is
	// neither signed nor pushed.
	other, err := nkeys.CreateAccount()
	require.NoError(t, err)
	otherPub, err := other.PublicKey()
	require.NoError(t, err)
	forged := TenantAccount(cfg.Subjects, "EVIL", otherPub)
	forged.Imports[0].Subject = jwt.Subject(strings.ReplaceAll(string(forged.Imports[0].Subject), otherPub, tn.Account))
	_, err = SignAccount(cfg, forged)
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
	extra := TenantAccount(cfg.Subjects, "EXTRA", otherPub)
	extra.Imports.Add(&jwt.Import{Type: jwt.Service, Account: setup.Toolq, Subject: "$JS.API.>"})
	_, err = SignAccount(cfg, extra)
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
	_, err = os.Stat(filepath.Join(cfg.Dir, "jwt", otherPub+".jwt"))
	require.ErrorIs(t, err, os.ErrNotExist)

	_, err = AddTenant(cfg, "ACME", nil)
	require.ErrorIs(t, err, contracts.ErrInvalidInput, "%v", err)
	for _, bad := range []string{"", "a.b", "TOOLQ", "sys", "$G", "x>"} {
		_, err = AddTenant(cfg, bad, nil)
		require.ErrorIs(t, err, contracts.ErrInvalidInput, "%q: %v", bad, err)
	}

	// Seeds and credentials are the owner's alone.
	err = filepath.WalkDir(cfg.Dir, func(path string, d os.DirEntry, err error) error {
		require.NoError(t, err)
		info, err := d.Info()
		require.NoError(t, err)
		if d.IsDir() {
			require.Equal(t, os.FileMode(0o700), info.Mode().Perm(), path)
		} else {
			require.Equal(t, os.FileMode(0o600), info.Mode().Perm(), path)
		}
		return nil
	})
	require.NoError(t, err)
	conf, err := os.ReadFile(setup.ServerConf)
	require.NoError(t, err)
	require.Contains(t, string(conf), "system_account: "+setup.System)
	require.Contains(t, string(conf), "type: full")
}

// TestPrefix: another prefix renames every subject, stream and bucket.
func TestPrefix(t *testing.T) {
	t.Parallel()
	s := contracts.Subjects{Prefix: "acme"}
	perms := roleTenantAgent.permissions(s)
	for _, subj := range append(append([]string{}, perms.Pub.Allow...), perms.Sub.Allow...) {
		require.NotContains(t, strings.ToLower(subj), "toolq", subj)
	}
	for _, e := range toolqAccount(s, "A").Exports {
		require.NotContains(t, strings.ToLower(string(e.Subject)), "toolq", e.Subject)
		require.Equal(t, "*", strings.Split(string(e.Subject), ".")[e.AccountTokenPosition-1])
	}
}
