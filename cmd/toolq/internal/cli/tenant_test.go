package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
)

// TestTenantAdd generates a tenant: the seed file belongs to the user in
// the printed entry, the entry is the shipped tenants.conf's block for the
// same name (so the two cannot drift), and the server loads it.
func TestTenantAdd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, out, errOut := run(t, "tenant", "add", "ACME", "--out", dir, "--log-level", "warn")
	require.Equal(t, 0, code, errOut)

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
}
