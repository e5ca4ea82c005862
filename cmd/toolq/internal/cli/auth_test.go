package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
)

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{ //nolint:gosec // G101: made-up credentials to redact
		"nats://127.0.0.1:4222":                         "nats://127.0.0.1:4222",
		"nats://worker:s3cr3t-pw@nats:4222":             "nats://worker:xxxxx@nats:4222",
		"nats://s3cr3t-token@nats:4222":                 "nats://xxxxx@nats:4222",
		"nats://a:s3cr3t@h1:4222, nats://b:s3cr3t@h2:1": "nats://a:xxxxx@h1:4222,nats://b:xxxxx@h2:1",
		"tls://h:4222":                                  "tls://h:4222",
	} {
		require.Equal(t, want, redactURL(in), in)
	}
}

// TestConnectErrorsHideSecrets: a failed connect names the server without
// its password, and conflicting logins are refused before connecting.
func TestConnectErrorsHideSecrets(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "--nats", "nats://worker:s3cr3t-pw@127.0.0.1:1", "--timeout", "2s", "submit", "--tool", "noop")
	require.NotEqual(t, 0, code)
	require.NotContains(t, out+errOut, "s3cr3t-pw")
	require.Contains(t, errOut, "worker:xxxxx@127.0.0.1:1")

	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	seed, err := kp.Seed()
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "u.nk")
	require.NoError(t, os.WriteFile(path, seed, 0o600))
	code, _, errOut = run(t, "--nkey-seed", path, "--creds", path, "submit", "--tool", "noop")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "log in one way")
	code, _, errOut = run(t, "--tls-cert", path, "submit", "--tool", "noop")
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "go together")
}
