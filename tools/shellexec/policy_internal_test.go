package shellexec

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/shell"
)

func TestMergeOnlyTightensModes(t *testing.T) {
	t.Parallel()
	w := shell.Policy{
		Security: shell.SecurityAllowlist, Ask: shell.AskOnMiss, Allowlist: []string{"/usr/bin/echo"},
		SafeBins: []string{"tr"}, Path: []string{"/usr/bin"}, AllowWorkerHost: false,
	}
	cases := []struct {
		name     string
		worker   shell.Policy
		shared   shell.Policy
		host     shell.Host
		security shell.Security
		ask      shell.Ask
	}{
		{"nothing shared", w, shell.Policy{}, shell.HostSandbox, shell.SecurityAllowlist, shell.AskOnMiss},
		{"looser shared modes ignored", w, shell.Policy{Security: shell.SecurityFull, Ask: shell.AskOff}, shell.HostSandbox, shell.SecurityAllowlist, shell.AskOnMiss},
		{"stricter shared modes win", w, shell.Policy{Security: shell.SecurityDeny, Ask: shell.AskAlways}, shell.HostSandbox, shell.SecurityDeny, shell.AskAlways},
		{"unset worker security is the host default (sandbox: deny)", shell.Policy{}, shell.Policy{Security: shell.SecurityFull}, shell.HostSandbox, shell.SecurityDeny, ""},
		{"unset worker security is the host default (worker: allowlist)", shell.Policy{}, shell.Policy{Security: shell.SecurityFull}, shell.HostWorker, shell.SecurityAllowlist, ""},
		{"unset worker ask is on-miss", shell.Policy{}, shell.Policy{Ask: shell.AskOff}, "", "", shell.AskOnMiss},
	}
	for _, tc := range cases {
		got := merge(tc.worker, tc.shared, tc.host)
		require.Equal(t, tc.security, got.Security, tc.name)
		require.Equal(t, tc.ask, got.Ask, tc.name)
	}

	shared := shell.Policy{
		Allowlist: []string{"/usr/bin/seq", "/usr/bin/echo"}, SafeBins: []string{"wc"},
		Path: []string{"/tmp/evil"}, Shell: "/tmp/evil/sh", AllowWorkerHost: true, AllowSubstitution: true,
		WorkdirRoots: []string{"/"}, DefaultWorkdir: "/etc",
	}
	got := merge(w, shared, shell.HostWorker)
	require.Equal(t, []string{"/usr/bin/echo", "/usr/bin/seq"}, got.Allowlist)
	require.Equal(t, []string{"tr", "wc"}, got.SafeBins)
	require.Equal(t, []string{"/usr/bin"}, got.Path, "host settings stay the worker's")
	require.Empty(t, got.Shell)
	require.False(t, got.AllowWorkerHost)
	require.False(t, got.AllowSubstitution)
	require.Empty(t, got.WorkdirRoots)
	require.Empty(t, got.DefaultWorkdir)
	require.Equal(t, []string{"/usr/bin/echo"}, w.Allowlist, "the worker's policy is not modified")
}

func TestDecodePolicyIsStrict(t *testing.T) {
	t.Parallel()
	_, err := DecodePolicy([]byte(`{"security":"allowlist","allowlist":["/usr/bin/git"]}`))
	require.NoError(t, err)
	for _, bad := range []string{`{"securty":"deny"}`, `{"security":"sometimes"}`, `{"allowlist":["git"]}`, `[]`, `{`} {
		_, err := DecodePolicy([]byte(bad))
		require.Error(t, err, bad)
	}
}
