package shell

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"mvdan.cc/sh/v3/syntax"
)

// outcomeRank orders outcomes by how much they let run without a person.
func outcomeRank(o Outcome) int {
	switch o {
	case Allow:
		return 2
	case NeedsApproval:
		return 1
	}
	return 0
}

func hasSubstitution(cmd string) bool {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(cmd), "")
	if err != nil {
		return false
	}
	found := false
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n.(type) {
		case *syntax.CmdSubst, *syntax.ProcSubst:
			found = true
		}
		return !found
	})
	return found
}

// FuzzEvaluate feeds random shell text to the policy. It must never panic;
// a stricter policy never allows what a looser one does not, and never lets
// through what the looser one refuses; a substitution is never allowed by
// default; and an allowed command's rebuilt script, read again (as bash and
// as POSIX sh), is allowed with the same argv — so the script that runs is
// the one that was checked.
func FuzzEvaluate(f *testing.F) {
	for _, s := range []string{
		"ls -la", "ls | grep foo | wc -l", "ls && echo ok || rm x", "ls; rm -rf /", "l's' -la",
		"ls $(id)", "ls `id`", "cat <(ls)", "(ls)", "eval ls", "cat <<EOF\nx\nEOF", "$X", "l*",
		"LD_PRELOAD=x ls", "PATH=/tmp ls", "env ls", "sh -c ls", "xargs rm", "sort -o x", "grep -R x",
		"echo \"a\\$b\" 'c'\"'\"'d'", "! ls", "ls > x", "ls 2>&1", "{ ls; }", "if ls; then ls; fi",
		"echo $'\\x41'", "ls\\\n-la", "ls # $(id)", "echo ${a:-$(id)}", "ls &", "time ls", "a=1 ls",
		"echo \"$(\"", "cat | jq --arg a b .", "head -5", "ls -- -rf", "echo '\n'", "echo \\'",
		"cat | sort -u -", "find . -exec rm {} +", "git -c core.pager=x log", "tar -xf x --to-command=sh", "sed e",
	} {
		f.Add(s)
	}
	b := setupPolicy(f)
	loosest := b.policy
	loosest.AllowSubstitution, loosest.AllowSubshell, loosest.AllowEvalBuiltins = true, true, true
	loosest.AllowHeredoc, loosest.AllowDynamicCommand = true, true
	stricter := map[string]Policy{}
	for name, mut := range map[string]func(p *Policy){
		"deny":        func(p *Policy) { p.Security = SecurityDeny },
		"ask always":  func(p *Policy) { p.Ask = AskAlways },
		"no allow":    func(p *Policy) { p.Allowlist = nil },
		"no safe":     func(p *Policy) { p.SafeBins = nil },
		"half allow":  func(p *Policy) { p.Allowlist = p.Allowlist[:len(p.Allowlist)/2] },
		"nothing":     func(p *Policy) { p.Allowlist, p.SafeBins = nil, nil },
		"ask off":     func(p *Policy) { p.Ask = AskOff },
		"no worker":   func(p *Policy) { p.AllowWorkerHost = false },
		"no allow/on": func(p *Policy) { p.Allowlist = nil; p.Ask = AskAlways },
	} {
		p := b.policy
		p.Allowlist = append([]string(nil), p.Allowlist...)
		mut(&p)
		stricter[name] = p
	}

	f.Fuzz(func(t *testing.T, cmd string) {
		in := &Input{Command: cmd}
		in.ApplyDefaults()
		base := Evaluate(b.policy, in)
		loose := Evaluate(loosest, in)
		full := Evaluate(Policy{Security: SecurityFull, Ask: AskOff, Path: b.policy.Path}, in)

		// Looser never yields less; full allows whatever is not empty.
		require.GreaterOrEqual(t, outcomeRank(loose.Outcome), outcomeRank(base.Outcome), "loosest vs base for %q", cmd)
		if strings.TrimSpace(cmd) != "" && !strings.ContainsRune(cmd, 0) && len(cmd) <= MaxCommandBytes {
			require.Equal(t, Allow, full.Outcome, "%q: %s", cmd, full.Reason)
		} else {
			require.Equal(t, Deny, full.Outcome, "%q", cmd)
		}
		// The Allow* flags never make anything run without a person.
		if loose.Outcome == Allow {
			require.Equal(t, Allow, base.Outcome, "an Allow* flag auto-allowed %q", cmd)
		}
		for name, p := range stricter {
			d := Evaluate(p, in)
			if d.Outcome == Allow {
				require.Equal(t, Allow, base.Outcome, "%s allowed %q that the base policy does not", name, cmd)
			}
			if p.Ask == b.policy.Ask && base.Outcome == Deny {
				require.Equal(t, Deny, d.Outcome, "%s let through %q that the base policy denies", name, cmd)
			}
			if p.Ask == AskOff && base.Outcome != Allow {
				require.Equal(t, Deny, d.Outcome, "ask off did not deny %q", cmd)
			}
		}
		if hasSubstitution(cmd) {
			require.Equal(t, Deny, base.Outcome, "substitution in %q not denied by default", cmd)
			require.NotEqual(t, Allow, loose.Outcome, "substitution in %q allowed", cmd)
		}
		switch base.Outcome {
		case Allow:
			require.Empty(t, base.Misses)
			require.NotEmpty(t, base.Script)
			again := Evaluate(b.policy, &Input{Command: base.Script, Host: HostSandbox})
			require.Equal(t, Allow, again.Outcome, "script %q of %q: %s", base.Script, cmd, again.Reason)
			require.Equal(t, base.Argv, again.Argv, "script %q of %q", base.Script, cmd)
			require.Equal(t, base.Script, again.Script)
			_, err := syntax.NewParser(syntax.Variant(syntax.LangPOSIX)).Parse(strings.NewReader(base.Script), "")
			require.NoError(t, err, "script %q is not POSIX", base.Script)
			for _, argv := range base.Argv {
				require.True(t, strings.HasPrefix(argv[0], b.bin+"/"), "argv %q", argv)
			}
		case Deny:
			require.NotEmpty(t, base.Reason)
			require.Empty(t, base.Script)
		case NeedsApproval:
			require.NotEmpty(t, base.Reason)
			require.NotEmpty(t, base.Script)
		default:
			t.Fatalf("unknown outcome %q", base.Outcome)
		}
	})
}

func BenchmarkEvaluate(b *testing.B) {
	pb := setupPolicy(b)
	for name, cmd := range map[string]string{
		"pipeline":      "ls -la | grep foo | sort -k2 | head -n 5",
		"long pipeline": strings.Repeat("ls | ", 2000) + "ls",
		"substitution":  "ls $(rm -rf /)",
	} {
		in := &Input{Command: cmd}
		in.ApplyDefaults()
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				_ = Evaluate(pb.policy, in)
			}
		})
	}
}
