package shell

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// TestEvaluateEnvAllowlist: env overrides pass only when the default set or
// the worker's envAllow lists them, in every mode and on both hosts; the
// fixed refusals stay refused even when listed.
func TestEvaluateEnvAllowlist(t *testing.T) {
	t.Parallel()
	b := setupPolicy(t)
	widened := b.policy
	widened.EnvAllow = []string{"GIT_SSH_COMMAND", "MYAPP_*"}
	everything := b.policy
	everything.EnvAllow = []string{"*", "PATH", "LD_PRELOAD", "BASH_ENV"} // Validate refuses the last three; Evaluate must too
	cases := []struct {
		name   string
		policy Policy
		env    string
		ok     bool
	}{
		{name: "default", policy: b.policy, env: "LANG", ok: true},
		{name: "default", policy: b.policy, env: "LANGUAGE", ok: true},
		{name: "default", policy: b.policy, env: "LC_ALL", ok: true},
		{name: "default", policy: b.policy, env: "LC_CTYPE", ok: true},
		{name: "default", policy: b.policy, env: "TZ", ok: true},
		{name: "default", policy: b.policy, env: "TERM", ok: true},
		{name: "default", policy: b.policy, env: "NO_COLOR", ok: true},
		{name: "default", policy: b.policy, env: "COLUMNS", ok: true},
		{name: "default", policy: b.policy, env: "CI", ok: true},
		{name: "default", policy: b.policy, env: "lang"},
		{name: "default", policy: b.policy, env: "LC"},
		{name: "default", policy: b.policy, env: "FOO"},
		{name: "default", policy: b.policy, env: "GIT_CONFIG_COUNT"},
		{name: "default", policy: b.policy, env: "GIT_CONFIG_KEY_0"},
		{name: "default", policy: b.policy, env: "GIT_CONFIG_VALUE_0"},
		{name: "default", policy: b.policy, env: "GIT_CONFIG_PARAMETERS"},
		{name: "default", policy: b.policy, env: "GIT_CONFIG_GLOBAL"},
		{name: "default", policy: b.policy, env: "GIT_SSH_COMMAND"},
		{name: "default", policy: b.policy, env: "GIT_SSH"},
		{name: "default", policy: b.policy, env: "GIT_PAGER"},
		{name: "default", policy: b.policy, env: "GIT_EDITOR"},
		{name: "default", policy: b.policy, env: "GIT_EXTERNAL_DIFF"},
		{name: "default", policy: b.policy, env: "GIT_EXEC_PATH"},
		{name: "default", policy: b.policy, env: "GIT_ASKPASS"},
		{name: "default", policy: b.policy, env: "TAR_OPTIONS"},
		{name: "default", policy: b.policy, env: "PAGER"},
		{name: "default", policy: b.policy, env: "MANPAGER"},
		{name: "default", policy: b.policy, env: "EDITOR"},
		{name: "default", policy: b.policy, env: "VISUAL"},
		{name: "default", policy: b.policy, env: "LESS"},
		{name: "default", policy: b.policy, env: "LESSOPEN"},
		{name: "default", policy: b.policy, env: "LESSCLOSE"},
		{name: "default", policy: b.policy, env: "NODE_OPTIONS"},
		{name: "default", policy: b.policy, env: "PERL5OPT"},
		{name: "default", policy: b.policy, env: "PERL5LIB"},
		{name: "default", policy: b.policy, env: "PYTHONPATH"},
		{name: "default", policy: b.policy, env: "PYTHONSTARTUP"},
		{name: "default", policy: b.policy, env: "RUBYOPT"},
		{name: "default", policy: b.policy, env: "JAVA_TOOL_OPTIONS"},
		{name: "default", policy: b.policy, env: "SSH_ASKPASS"},
		{name: "default", policy: b.policy, env: "GREP_OPTIONS"},
		{name: "default", policy: b.policy, env: "TOOLQ_APPROVER_SEED_FILE"},
		{name: "default", policy: b.policy, env: "PATH"},
		{name: "default", policy: b.policy, env: "LD_PRELOAD"},
		{name: "widened", policy: widened, env: "GIT_SSH_COMMAND", ok: true},
		{name: "widened", policy: widened, env: "MYAPP_TOKEN", ok: true},
		{name: "widened", policy: widened, env: "LANG", ok: true},
		{name: "widened", policy: widened, env: "MYAPP"},
		{name: "widened", policy: widened, env: "GIT_SSH"},
		{name: "widened", policy: widened, env: "TAR_OPTIONS"},
		{name: "everything", policy: everything, env: "FOO", ok: true},
		{name: "everything", policy: everything, env: "NODE_OPTIONS", ok: true},
		{name: "everything", policy: everything, env: "PATH"},
		{name: "everything", policy: everything, env: "Path"},
		{name: "everything", policy: everything, env: "LD_PRELOAD"},
		{name: "everything", policy: everything, env: "LD_LIBRARY_PATH"},
		{name: "everything", policy: everything, env: "DYLD_INSERT_LIBRARIES"},
		{name: "everything", policy: everything, env: "BASH_ENV"},
		{name: "everything", policy: everything, env: "BASH_FUNC_ls"},
		{name: "everything", policy: everything, env: "GCONV_PATH"},
		{name: "everything", policy: everything, env: "HOME"},
	}
	for _, tc := range cases {
		for _, mode := range []Security{SecurityAllowlist, SecurityFull} {
			for _, host := range []Host{HostSandbox, HostWorker} {
				t.Run(tc.name+"/"+tc.env+"/"+string(mode)+"/"+string(host), func(t *testing.T) {
					t.Parallel()
					p := tc.policy
					p.Security = mode
					in := &Input{Command: "ls", Host: host, Env: map[string]string{tc.env: "x", "LANG": "C.UTF-8"}}
					in.ApplyDefaults()
					d := Evaluate(p, in)
					err := p.CheckEnv(in.Env)
					if tc.ok {
						require.Equal(t, Allow, d.Outcome, d.Reason)
						require.NoError(t, err)
						return
					}
					require.Equal(t, Deny, d.Outcome)
					require.Contains(t, strings.ToUpper(d.Reason), "ENV."+strings.ToUpper(tc.env), "the reason names the variable")
					require.ErrorIs(t, err, contracts.ErrDenied)
					require.Contains(t, err.Error(), d.Reason)
					if EnvRefusal(tc.env) == "" {
						require.Contains(t, d.Reason, "envAllow", "the reason says how to allow it")
					}
				})
			}
		}
	}
}

func TestCheckEnvNamesTheFirstRefusal(t *testing.T) {
	t.Parallel()
	p := &Policy{}
	require.NoError(t, p.CheckEnv(nil))
	require.NoError(t, p.CheckEnv(map[string]string{"LANG": "C", "LC_ALL": "C"}))
	err := p.CheckEnv(map[string]string{"ZZ": "1", "PAGER": "less", "LANG": "C"})
	require.ErrorIs(t, err, contracts.ErrDenied)
	require.Contains(t, err.Error(), "env.PAGER is not on the exec policy's env allowlist")
	require.Contains(t, err.Error(), `adding "PAGER" to envAllow`)
	err = p.CheckEnv(map[string]string{"bad-name": "1"})
	require.ErrorIs(t, err, contracts.ErrDenied)
}
