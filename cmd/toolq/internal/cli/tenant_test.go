package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/internal/testutil"
)

// TestTenantAdd generates a tenant: the seed file belongs to the user in
// the printed entry, the entry is the shipped tenants.conf's block for the
// same name (so the two cannot drift), and the server loads it.
func TestTenantAdd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, approver := newUserKey(t)
	code, out, errOut := run(t, "tenant", "add", "ACME", "--out", dir, "--log-level", "warn", "--approver", approver)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `{ nkey = "`+approver+`", permissions = $TENANT_APPROVER }`)

	seedPath := filepath.Join(dir, "ACME.nk")
	fi, err := os.Stat(seedPath)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	seed, err := os.ReadFile(seedPath) //nolint:gosec // G304: the test's own temp dir
	require.NoError(t, err)
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	require.Contains(t, out, `nkey = "`+pub+`"`)

	conf, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "deploy", "nats", "tenants.conf"))
	require.NoError(t, err)
	shipped := regexp.MustCompile(`(?s)  # tenant ACME\n.*?\n  }\n`).FindString(string(conf))
	require.NotEmpty(t, shipped)
	userKey := regexp.MustCompile(`U[A-Z2-7]{55}`)
	require.Equal(t, userKey.ReplaceAllString(shipped, "KEY"), userKey.ReplaceAllString(out, "KEY"),
		"toolq tenant add and deploy/nats/tenants.conf disagree")

	text := strings.Replace(string(conf), shipped, out, 1)
	text = strings.NewReplacer("$TOOLQ_WORKER_PASSWORD", `"w"`, "$TOOLQ_SCHEDULER_PASSWORD", `"s"`).Replace(text)
	path := filepath.Join(dir, "tenants.conf")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600)) //nolint:gosec // G703: a fixed name in the test's temp dir
	opts, err := server.ProcessConfigFile(path)
	require.NoError(t, err)
	opts.NoLog, opts.NoSigs, opts.DontListen = true, true, true
	ns, err := server.NewServer(opts)
	require.NoError(t, err)
	ns.Shutdown()

	// The entry edited to import another tenant's subspace: the server
	// refuses the whole configuration.
	for _, im := range []string{"toolq.t.ACME.jobs.>", "toolq.t.ACME.events.>", "$KV.toolq_cancels.ACME.*"} {
		evil := strings.Replace(text, `subject = "`+im+`"`, `subject = "`+strings.Replace(im, "ACME", "GLOBEX", 1)+`"`, 1)
		require.NotEqual(t, text, evil)
		require.NoError(t, os.WriteFile(path, []byte(evil), 0o600)) //nolint:gosec // G703: a fixed name in the test's temp dir
		opts, err := server.ProcessConfigFile(path)
		if err == nil {
			opts.NoLog, opts.NoSigs, opts.DontListen = true, true, true
			_, err = server.NewServer(opts)
		}
		require.ErrorContains(t, err, "not authorized", im)
	}

	// The seed is never overwritten; reserved and invalid names are refused.
	code, _, _ = run(t, "tenant", "add", "ACME", "--out", dir)
	require.NotEqual(t, 0, code)
	for _, name := range []string{"TOOLQ", "$SYS", "a.b", ""} {
		code, _, _ = run(t, "tenant", "add", name, "--out", dir)
		require.NotEqual(t, 0, code, name)
	}
	// An approver must be a user key: it becomes a user of the account.
	for _, k := range []string{"nope", "SUAB", strings.Replace(approver, "U", "A", 1)} {
		code, _, errOut = run(t, "tenant", "add", "INITECH", "--out", dir, "--approver", k)
		require.NotEqual(t, 0, code, k)
		require.Contains(t, errOut, "--approver", k)
	}
}

func newUserKey(t *testing.T) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	return kp, pub
}

// TestTenantRegisterLsRm: register makes the tenant's jobs stream and
// record, ls lists it with its queue, rm removes both (and asks first).
func TestTenantRegisterLsRm(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	url := srv.ClientURL()
	code, out, errOut := run(t, "--nats", url, "--json", "tenant", "ls")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, `[]`, out)
	_, approver := newUserKey(t)
	code, _, errOut = run(t, "--nats", url, "tenant", "register", "ACME", "--queue-limit", "2", "--approver", approver, "--weight", "3")
	require.Equal(t, 0, code, errOut)
	for _, w := range []string{"0", "101"} {
		code, _, errOut = run(t, "--nats", url, "tenant", "register", "ACME", "--weight", w)
		require.Equal(t, 2, code, errOut)
		require.Contains(t, errOut, "--weight "+w+" out of range [1, 100]")
	}
	code, _, errOut = run(t, "--nats", url, "tenant", "register", "ACME", "--approver", "SUABC")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "--approver")
	code, _, errOut = run(t, "--nats", url, "tenant", "register", "no.dots")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "tenant name")

	nc := srv.Connect(t)
	ctx := testutil.Context(t, 10*time.Second)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	for range 2 {
		_, err = js.Publish(ctx, "toolq.t.ACME.jobs.noop", []byte(`{}`))
		require.NoError(t, err)
	}
	_, err = js.Publish(ctx, "toolq.t.ACME.jobs.noop", []byte(`{}`))
	require.Error(t, err, "the queue limit is the stream's")

	code, out, errOut = run(t, "--nats", url, "--json", "tenant", "ls")
	require.Equal(t, 0, code, errOut)
	var rows []struct {
		Name       string   `json:"name"`
		QueueLimit int64    `json:"queueLimit"`
		Queued     uint64   `json:"queued"`
		Approvers  []string `json:"approvers"`
		Weight     int      `json:"weight"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 1)
	require.Equal(t, "ACME", rows[0].Name)
	require.Equal(t, 3, rows[0].Weight)
	require.EqualValues(t, 2, rows[0].QueueLimit)
	require.EqualValues(t, 2, rows[0].Queued)
	require.Equal(t, []string{approver}, rows[0].Approvers)

	code, _, errOut = run(t, "--nats", url, "tenant", "rm", "ACME")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "--yes")
	code, _, errOut = run(t, "--nats", url, "tenant", "rm", "ACME", "--yes")
	require.Equal(t, 0, code, errOut)
	_, err = js.Publish(ctx, "toolq.t.ACME.jobs.noop", []byte(`{}`))
	require.ErrorIs(t, err, jetstream.ErrNoStreamResponse)
	code, out, _ = run(t, "--nats", url, "--json", "tenant", "ls")
	require.Equal(t, 0, code)
	require.JSONEq(t, `[]`, out)
}
