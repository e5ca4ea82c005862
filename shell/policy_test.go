package shell

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// fakeBins are the executables of the test PATH.
var fakeBins = []string{
	"ls", "cat", "echo", "grep", "sort", "head", "tail", "wc", "jq", "tr", "cut", "uniq",
	"env", "sh", "bash", "xargs", "nice", "timeout", "sudo", "rm", "find", "awk", "python3",
	"curl", "true",
}

type policyBundle struct {
	bin    string // the fixed PATH directory
	other  string // a directory off the PATH with its own ls
	work   string // a workdir root
	policy Policy
}

// setupPolicy builds a PATH of fake executables and a worker policy in
// allowlist mode over it. Wrappers (env, sh, xargs, nice, lnenv) are
// allowlisted on purpose: they must still not pass.
func setupPolicy(tb testing.TB) *policyBundle {
	tb.Helper()
	root := tb.TempDir()
	b := &policyBundle{
		bin:   filepath.Join(root, "bin"),
		other: filepath.Join(root, "other"),
		work:  filepath.Join(root, "work"),
	}
	for _, d := range []string{b.bin, b.other, b.work, filepath.Join(b.work, "sub")} {
		require.NoError(tb, os.MkdirAll(d, 0o750))
	}
	for _, n := range fakeBins {
		//nolint:gosec // G306: a fake executable must have its exec bits; the temp dir is private
		require.NoError(tb, os.WriteFile(filepath.Join(b.bin, n), []byte("#!/bin/sh\n"), 0o755))
	}
	require.NoError(tb, os.WriteFile(filepath.Join(b.bin, "noexec"), []byte("x"), 0o600))
	//nolint:gosec // G306: a fake executable must have its exec bits; the temp dir is private
	require.NoError(tb, os.WriteFile(filepath.Join(b.other, "ls"), []byte("#!/bin/sh\n"), 0o755))
	require.NoError(tb, os.Symlink(filepath.Join(b.bin, "env"), filepath.Join(b.bin, "lnenv")))
	allow := []string{"ls", "cat", "echo", "env", "sh", "xargs", "nice", "lnenv", "true"}
	for i, n := range allow {
		allow[i] = filepath.Join(b.bin, n)
	}
	b.policy = Policy{
		Security:        SecurityAllowlist,
		Ask:             AskOnMiss,
		Allowlist:       allow,
		SafeBins:        []string{"grep", "sort", "head", "tail", "wc", "jq", "tr", "cut", "uniq"},
		Path:            []string{b.bin},
		AllowWorkerHost: true,
		WorkdirRoots:    []string{b.work},
	}
	require.NoError(tb, b.policy.Validate())
	return b
}

func TestEvaluateAllowlist(t *testing.T) {
	t.Parallel()
	b := setupPolicy(t)
	BIN, OTHER := b.bin, b.other
	cases := []struct {
		cmd    string
		want   Outcome
		reason string // a substring of the reason, when set
	}{
		// Allowed: every segment allowlisted or a stdin-only safe bin.
		{cmd: "ls -la", want: Allow},
		{cmd: "ls -la /etc", want: Allow},
		{cmd: "ls | grep foo | wc -l", want: Allow},
		{cmd: "ls && echo ok || echo fail", want: Allow},
		{cmd: "ls; echo done", want: Allow},
		{cmd: "ls\necho done", want: Allow},
		{cmd: "l's' -la", want: Allow},
		{cmd: `"ls" -la`, want: Allow},
		{cmd: `l\s`, want: Allow},
		{cmd: BIN + "/ls -la", want: Allow},
		{cmd: `ls "a b" 'c d' e\ f`, want: Allow},
		{cmd: `ls \*`, want: Allow},
		{cmd: `ls '*.go' "x?"`, want: Allow},
		{cmd: `echo 'a|b;c&&d $(id) ` + "`id`" + `'`, want: Allow},
		{cmd: `echo "a \$HOME \"q\""`, want: Allow},
		{cmd: "! ls", want: Allow},
		{cmd: "cat | sort -k2 -t, | head -n 5 | uniq -c", want: Allow},
		{cmd: "cat | grep -e foo -e bar", want: Allow},
		{cmd: "cat | grep -in foo", want: Allow},
		{cmd: "cat | grep --color=auto -E 'a|b'", want: Allow},
		{cmd: "cat | jq -r .name", want: Allow},
		{cmd: "cat | jq --arg x 1 '.[$x]'", want: Allow},
		{cmd: "cat | tr a-z A-Z", want: Allow},
		{cmd: "cat | head -5 | tail -n2", want: Allow},
		{cmd: "cat | cut -d, -f1 | sort -u", want: Allow},
		{cmd: "ls # $(rm -rf /) ; eval x", want: Allow},
		{cmd: "[ -f x ]", want: NeedsApproval, reason: "not found"}, // no [ on the test PATH

		// Misses: need a person.
		{cmd: "rm -rf /", want: NeedsApproval, reason: BIN + "/rm is not on the allowlist"},
		{cmd: "nosuchcmd", want: NeedsApproval, reason: "not found"},
		{cmd: "./ls", want: NeedsApproval, reason: "relative"},
		{cmd: "bin/ls", want: NeedsApproval, reason: "relative"},
		{cmd: OTHER + "/ls", want: NeedsApproval, reason: "not on the allowlist"},
		{cmd: BIN + "/../bin/ls", want: NeedsApproval, reason: "clean absolute"},
		{cmd: BIN + "//ls", want: NeedsApproval, reason: "clean absolute"},
		{cmd: BIN + "/noexec", want: NeedsApproval, reason: "not an executable"},
		{cmd: "ls > out", want: NeedsApproval, reason: "redirection"},
		{cmd: "ls >> out", want: NeedsApproval, reason: "redirection"},
		{cmd: "ls 2>&1", want: NeedsApproval, reason: "redirection"},
		{cmd: "ls < in", want: NeedsApproval, reason: "redirection"},
		{cmd: "ls &> out", want: NeedsApproval, reason: "redirection"},
		{cmd: "ls | grep x > out", want: NeedsApproval, reason: "redirection"},
		{cmd: "ls |& grep x", want: NeedsApproval, reason: "|&"},
		{cmd: "ls &", want: NeedsApproval, reason: "background"},
		{cmd: "ls & echo", want: NeedsApproval, reason: "background"},
		{cmd: "ls && rm x", want: NeedsApproval, reason: "rm is not on the allowlist"},
		{cmd: "ls; rm x", want: NeedsApproval, reason: "rm"},
		{cmd: "ls || rm x", want: NeedsApproval, reason: "rm"},
		{cmd: "ls | rm", want: NeedsApproval, reason: "rm"},
		{cmd: "cat | sort -u -", want: NeedsApproval, reason: `operand "-"`},
		{cmd: "cat | grep foo -", want: NeedsApproval, reason: `operand "-"`},
		{cmd: "cat | sort -o out", want: NeedsApproval, reason: "-o"},
		{cmd: "cat | sort --output=out", want: NeedsApproval, reason: "--output"},
		{cmd: "cat | sort -T /tmp", want: NeedsApproval, reason: "-T"},
		{cmd: "cat | sort --compress-program=sh", want: NeedsApproval, reason: "--compress-program"},
		{cmd: "cat | sort --files0-from=list", want: NeedsApproval},
		{cmd: "grep -R foo", want: NeedsApproval, reason: "-R"},
		{cmd: "grep -rn foo", want: NeedsApproval, reason: "-r"},
		{cmd: "grep --recursive foo", want: NeedsApproval},
		{cmd: "grep --rec foo", want: NeedsApproval},
		{cmd: "grep -f patterns", want: NeedsApproval},
		{cmd: "grep foo file", want: NeedsApproval, reason: "file"},
		{cmd: "grep foo -e bar", want: NeedsApproval, reason: "file"},
		{cmd: "cat | grep -- -v file", want: NeedsApproval, reason: "file"},
		{cmd: "head -n 5 file", want: NeedsApproval, reason: "file"},
		{cmd: "head -n", want: NeedsApproval, reason: "missing"},
		{cmd: "jq . file.json", want: NeedsApproval, reason: "file"},
		{cmd: "jq --rawfile x /etc/shadow .", want: NeedsApproval},
		{cmd: "jq -L /tmp .", want: NeedsApproval},
		{cmd: "wc -l file", want: NeedsApproval},
		{cmd: "cat | tr a b c", want: NeedsApproval},
		{cmd: "uniq in out", want: NeedsApproval},
		{cmd: "env ls", want: NeedsApproval, reason: "runs another command"},
		{cmd: "env LD_PRELOAD=/tmp/x.so ls", want: NeedsApproval, reason: "runs another command"},
		{cmd: "lnenv ls", want: NeedsApproval, reason: "runs another command"},
		{cmd: "sh -c ls", want: NeedsApproval, reason: "runs another command"},
		{cmd: "bash -c 'ls'", want: NeedsApproval, reason: "runs another command"},
		{cmd: "ls | xargs rm", want: NeedsApproval, reason: "runs another command"},
		{cmd: "nice ls", want: NeedsApproval, reason: "runs another command"},
		{cmd: "timeout 5 ls", want: NeedsApproval, reason: "runs another command"},
		{cmd: "sudo ls", want: NeedsApproval, reason: "runs another command"},
		{cmd: "find . -exec rm {} +", want: NeedsApproval},
		{cmd: "awk 'BEGIN{system(\"id\")}'", want: NeedsApproval, reason: "runs another command"},
		{cmd: "python3 -c 'import os'", want: NeedsApproval, reason: "runs another command"},
		{cmd: "ls *.go", want: NeedsApproval, reason: "glob"},
		{cmd: "ls ~", want: NeedsApproval, reason: "tilde"},
		{cmd: "ls ~/x", want: NeedsApproval, reason: "tilde"},
		{cmd: "ls {a,b}", want: NeedsApproval, reason: "brace"},
		{cmd: "ls [ab]", want: NeedsApproval, reason: "glob"},
		{cmd: "ls $HOME", want: NeedsApproval, reason: "expansion"},
		{cmd: `ls "$HOME"`, want: NeedsApproval, reason: "expansion"},
		{cmd: `ls "${HOME}/x"`, want: NeedsApproval, reason: "expansion"},
		{cmd: `ls $((1+2))`, want: NeedsApproval, reason: "expansion"},
		{cmd: `ls $'\x41'`, want: NeedsApproval, reason: "expansion"},
		{cmd: "if ls; then echo; fi", want: NeedsApproval, reason: "if"},
		{cmd: "for i in a; do ls; done", want: NeedsApproval, reason: "for"},
		{cmd: "while ls; do ls; done", want: NeedsApproval},
		{cmd: "f() { ls; }; f", want: NeedsApproval},
		{cmd: "{ ls; }", want: NeedsApproval},
		{cmd: "[[ -f x ]]", want: NeedsApproval},
		{cmd: "(( 1 ))", want: NeedsApproval},
		{cmd: "export A=1", want: NeedsApproval},
		{cmd: "A=1 ls", want: NeedsApproval, reason: "assignment"},
		{cmd: "A=1", want: NeedsApproval, reason: "assignment"},
		{cmd: "cd /tmp && ls", want: NeedsApproval, reason: "cd"},
		{cmd: "time ls", want: NeedsApproval},
		{cmd: "> out", want: NeedsApproval},

		// Refused outright.
		{cmd: "ls $(rm -rf /)", want: Deny, reason: "command substitution"},
		{cmd: "ls `id`", want: Deny, reason: "command substitution"},
		{cmd: `echo "$(id)"`, want: Deny, reason: "command substitution"},
		{cmd: `echo "${x:-$(id)}"`, want: Deny, reason: "command substitution"},
		{cmd: "cat <(ls)", want: Deny, reason: "process substitution"},
		{cmd: "ls > >(cat)", want: Deny, reason: "process substitution"},
		{cmd: "ls | $(echo sh)", want: Deny, reason: "substitution"},
		{cmd: "(ls)", want: Deny, reason: "subshell"},
		{cmd: "ls && (rm x)", want: Deny, reason: "subshell"},
		{cmd: "eval ls", want: Deny, reason: "eval"},
		{cmd: "ls; eval 'rm -rf /'", want: Deny, reason: "eval"},
		{cmd: "'eval' ls", want: Deny, reason: "eval"},
		{cmd: "source x", want: Deny, reason: "source"},
		{cmd: ". x", want: Deny, reason: `"."`},
		{cmd: "exec ls", want: Deny, reason: "exec"},
		{cmd: "command ls", want: Deny, reason: "command"},
		{cmd: "builtin echo", want: Deny, reason: "builtin"},
		{cmd: "trap 'rm x' EXIT", want: Deny, reason: "trap"},
		{cmd: "alias ls=rm", want: Deny, reason: "alias"},
		{cmd: "hash -p /tmp/x ls", want: Deny, reason: "hash"},
		{cmd: "enable -f x.so y", want: Deny, reason: "enable"},
		{cmd: "let x=1", want: Deny, reason: "let"},
		{cmd: "if true; then eval x; fi", want: Deny, reason: "eval"},
		{cmd: "cat <<EOF\nhi\nEOF", want: Deny, reason: "here-document"},
		{cmd: "cat <<'EOF'\nhi\nEOF", want: Deny, reason: "here-document"},
		{cmd: "cat <<< hi", want: Deny, reason: "here-document"},
		{cmd: "$CMD", want: Deny, reason: "expansion in command position"},
		{cmd: "${CMD} -la", want: Deny, reason: "expansion in command position"},
		{cmd: `"$CMD"`, want: Deny, reason: "expansion in command position"},
		{cmd: "ls | $X", want: Deny, reason: "expansion in command position"},
		{cmd: "l*", want: Deny, reason: "glob"},
		{cmd: BIN + "/l?", want: Deny, reason: "glob"},
		{cmd: "{ls,rm}", want: Deny, reason: "brace"},
		{cmd: "LD_PRELOAD=/tmp/x.so ls", want: Deny, reason: "LD_PRELOAD"},
		{cmd: "PATH=/tmp ls", want: Deny, reason: "PATH"},
		{cmd: "path=/tmp ls", want: Deny, reason: "path"},
		{cmd: "DYLD_INSERT_LIBRARIES=x ls", want: Deny, reason: "DYLD"},
		{cmd: "BASH_ENV=/tmp/x ls", want: Deny, reason: "BASH_ENV"},
		{cmd: "export LD_PRELOAD=/tmp/x.so", want: Deny, reason: "LD_PRELOAD"},
		{cmd: "ls; PATH=/tmp; ls", want: Deny, reason: "PATH"},
		{cmd: "a=$(id) ls", want: Deny, reason: "substitution"},
		{cmd: "ls '", want: Deny, reason: "parse"},
		{cmd: "ls &&", want: Deny, reason: "parse"},
	}
	for _, tc := range cases {
		t.Run(tc.cmd, func(t *testing.T) {
			t.Parallel()
			in := &Input{Command: tc.cmd}
			in.ApplyDefaults()
			d := Evaluate(b.policy, in)
			require.Equal(t, tc.want, d.Outcome, "reason: %s", d.Reason)
			if tc.reason != "" {
				require.Contains(t, d.Reason, tc.reason)
			}
			if d.Outcome == Allow {
				require.NotEmpty(t, d.Script)
				require.Empty(t, d.Misses)
			}
			if d.Outcome == Deny {
				require.Empty(t, d.Script, "a denied decision carries nothing to run")
			}
		})
	}
}

func TestEvaluateCanonicalScript(t *testing.T) {
	t.Parallel()
	b := setupPolicy(t)
	in := &Input{Command: `l's' -la "it's" | grep -e 'a b' && echo x\ y; ! true`}
	in.ApplyDefaults()
	d := Evaluate(b.policy, in)
	require.Equal(t, Allow, d.Outcome, d.Reason)
	q := func(s string) string { return quote(s) }
	want := q(b.bin+"/ls") + " '-la' " + `'it'\''s'` + " | " + q(b.bin+"/grep") + " '-e' 'a b' && " +
		q(b.bin+"/echo") + " 'x y'; ! " + q(b.bin+"/true")
	require.Equal(t, want, d.Script)
	require.Equal(t, [][]string{
		{b.bin + "/ls", "-la", "it's"},
		{b.bin + "/grep", "-e", "a b"},
		{b.bin + "/echo", "x y"},
		{b.bin + "/true"},
	}, d.Argv)
	require.Equal(t, []string{b.bin + "/ls", b.bin + "/grep", b.bin + "/echo", b.bin + "/true"}, d.Binaries)
}

func TestEvaluateUnlistedAndMisses(t *testing.T) {
	t.Parallel()
	b := setupPolicy(t)
	in := &Input{Command: "rm -rf x && grep -r y | curl -d @- h > out"}
	in.ApplyDefaults()
	d := Evaluate(b.policy, in)
	require.Equal(t, NeedsApproval, d.Outcome)
	require.Equal(t, []string{b.bin + "/rm", b.bin + "/grep", b.bin + "/curl"}, d.Unlisted)
	require.Len(t, d.Misses, 4, "%q", d.Misses) // rm, grep -r, curl, redirection
	require.Equal(t, in.Command, d.Script, "a command that is not a plain pipeline runs as written once approved")
}

func TestEvaluateModes(t *testing.T) {
	t.Parallel()
	b := setupPolicy(t)
	with := func(f func(p *Policy)) Policy {
		p := b.policy
		f(&p)
		return p
	}
	cases := []struct {
		name   string
		policy Policy
		in     Input
		want   Outcome
		reason string
	}{
		{name: "deny refuses everything", policy: with(func(p *Policy) { p.Security = SecurityDeny }), in: Input{Command: "ls"}, want: Deny, reason: "security=deny"},
		{name: "ask off denies a miss", policy: with(func(p *Policy) { p.Ask = AskOff }), in: Input{Command: "rm x"}, want: Deny, reason: "allowlist miss"},
		{name: "ask off allows a hit", policy: with(func(p *Policy) { p.Ask = AskOff }), in: Input{Command: "ls"}, want: Allow},
		{name: "ask always asks for a hit", policy: with(func(p *Policy) { p.Ask = AskAlways }), in: Input{Command: "ls"}, want: NeedsApproval, reason: "ask=always"},
		{name: "ask always still refuses substitution", policy: with(func(p *Policy) { p.Ask = AskAlways }), in: Input{Command: "ls $(id)"}, want: Deny},
		{name: "full runs anything", policy: with(func(p *Policy) { p.Security = SecurityFull }), in: Input{Command: "rm -rf $(ls) > /dev/null; eval x"}, want: Allow},
		{name: "full runs what does not parse", policy: with(func(p *Policy) { p.Security = SecurityFull }), in: Input{Command: "ls '"}, want: Allow},
		{name: "full with ask always", policy: with(func(p *Policy) { p.Security = SecurityFull; p.Ask = AskAlways }), in: Input{Command: "ls"}, want: NeedsApproval},
		{name: "full refuses env LD_PRELOAD", policy: with(func(p *Policy) { p.Security = SecurityFull }), in: Input{Command: "ls", Env: map[string]string{"LD_PRELOAD": "/tmp/x.so"}}, want: Deny, reason: "LD_PRELOAD"},
		{name: "full refuses env PATH", policy: with(func(p *Policy) { p.Security = SecurityFull }), in: Input{Command: "ls", Env: map[string]string{"PATH": "/tmp"}}, want: Deny, reason: "PATH"},
		{name: "full refuses env Path", policy: with(func(p *Policy) { p.Security = SecurityFull }), in: Input{Command: "ls", Env: map[string]string{"Path": "/tmp"}}, want: Deny, reason: "PATH"},
		{name: "full refuses env ld_library_path", policy: with(func(p *Policy) { p.Security = SecurityFull }), in: Input{Command: "ls", Env: map[string]string{"ld_library_path": "/tmp"}}, want: Deny},
		{name: "full refuses env DYLD", policy: with(func(p *Policy) { p.Security = SecurityFull }), in: Input{Command: "ls", Env: map[string]string{"DYLD_INSERT_LIBRARIES": "x"}}, want: Deny},
		{name: "sandbox refuses env LD_AUDIT", policy: b.policy, in: Input{Command: "ls", Host: HostSandbox, Env: map[string]string{"LD_AUDIT": "x"}}, want: Deny},
		{name: "env BASH_ENV refused", policy: b.policy, in: Input{Command: "ls", Env: map[string]string{"BASH_ENV": "/tmp/x"}}, want: Deny},
		{name: "allowlisted env accepted", policy: b.policy, in: Input{Command: "ls", Env: map[string]string{"TZ": "UTC"}}, want: Allow},
		{name: "unlisted env refused", policy: b.policy, in: Input{Command: "ls", Env: map[string]string{"FOO": "bar"}}, want: Deny, reason: "env.FOO"},
		{name: "worker host refused", policy: with(func(p *Policy) { p.AllowWorkerHost = false }), in: Input{Command: "ls", Host: HostWorker}, want: Deny, reason: "host=worker"},
		{name: "worker host allowed", policy: b.policy, in: Input{Command: "ls", Host: HostWorker}, want: Allow},
		{name: "job security applied even without Effective", policy: with(func(p *Policy) { p.Security = SecurityFull }), in: Input{Command: "rm x", Security: SecurityAllowlist}, want: NeedsApproval},
		{name: "job cannot loosen without Effective", policy: b.policy, in: Input{Command: "rm x", Security: SecurityFull, Ask: AskOff}, want: NeedsApproval, reason: "allowlist miss"},
		{name: "job ask always applied without Effective", policy: b.policy, in: Input{Command: "ls", Ask: AskAlways}, want: NeedsApproval},
		{name: "elevated refused", policy: with(func(p *Policy) { p.Security = SecurityFull }), in: Input{Command: "ls", Elevated: true}, want: Deny, reason: "elevated"},
		{name: "workdir inside root", policy: b.policy, in: Input{Command: "ls", Workdir: b.work + "/sub"}, want: Allow},
		{name: "workdir outside root", policy: with(func(p *Policy) { p.Security = SecurityFull }), in: Input{Command: "ls", Workdir: b.bin}, want: Deny, reason: "outside"},
		{name: "workdir escapes by ..", policy: b.policy, in: Input{Command: "ls", Workdir: b.work + "/../bin"}, want: Deny, reason: "outside"},
		{name: "workdir missing", policy: b.policy, in: Input{Command: "ls", Workdir: b.work + "/nope"}, want: Deny, reason: "does not exist"},
		{name: "substitution allowed by policy still needs a person", policy: with(func(p *Policy) { p.AllowSubstitution = true }), in: Input{Command: "echo $(ls)"}, want: NeedsApproval, reason: "command substitution"},
		{name: "subshell allowed by policy still needs a person", policy: with(func(p *Policy) { p.AllowSubshell = true }), in: Input{Command: "(ls)"}, want: NeedsApproval},
		{name: "heredoc allowed by policy still needs a person", policy: with(func(p *Policy) { p.AllowHeredoc = true }), in: Input{Command: "cat <<EOF\nx\nEOF"}, want: NeedsApproval},
		{name: "eval allowed by policy still needs a person", policy: with(func(p *Policy) { p.AllowEvalBuiltins = true }), in: Input{Command: "eval ls"}, want: NeedsApproval},
		{name: "dynamic command allowed by policy still needs a person", policy: with(func(p *Policy) { p.AllowDynamicCommand = true }), in: Input{Command: "$X"}, want: NeedsApproval},
		{name: "allowed substitution with ask off is denied", policy: with(func(p *Policy) { p.AllowSubstitution = true; p.Ask = AskOff }), in: Input{Command: "echo $(ls)"}, want: Deny},
		{name: "inline LD_PRELOAD refused even when constructs are allowed", policy: with(func(p *Policy) {
			p.AllowSubstitution, p.AllowSubshell, p.AllowEvalBuiltins, p.AllowHeredoc, p.AllowDynamicCommand = true, true, true, true, true
		}), in: Input{Command: "LD_PRELOAD=x ls"}, want: Deny},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := tc.in
			in.ApplyDefaults()
			d := Evaluate(tc.policy, &in)
			require.Equal(t, tc.want, d.Outcome, "reason: %s", d.Reason)
			if tc.reason != "" {
				require.Contains(t, d.Reason, tc.reason)
			}
		})
	}
}

func TestEffectiveOnlyTightens(t *testing.T) {
	t.Parallel()
	worker := Policy{Security: SecurityAllowlist, Ask: AskOnMiss, Allowlist: []string{"/usr/bin/ls"}, AllowWorkerHost: true}
	cases := []struct {
		name         string
		worker       Policy
		job          Input
		wantSecurity Security
		wantAsk      Ask
	}{
		{name: "job asks full", worker: worker, job: Input{Security: SecurityFull}, wantSecurity: SecurityAllowlist, wantAsk: AskOnMiss},
		{name: "job asks deny", worker: worker, job: Input{Security: SecurityDeny}, wantSecurity: SecurityDeny, wantAsk: AskOnMiss},
		{name: "job asks off", worker: worker, job: Input{Ask: AskOff}, wantSecurity: SecurityAllowlist, wantAsk: AskOnMiss},
		{name: "job asks always", worker: worker, job: Input{Ask: AskAlways}, wantSecurity: SecurityAllowlist, wantAsk: AskAlways},
		{name: "worker full, job allowlist", worker: Policy{Security: SecurityFull, Ask: AskOff}, job: Input{Security: SecurityAllowlist}, wantSecurity: SecurityAllowlist, wantAsk: AskOff},
		{name: "unset worker, sandbox", worker: Policy{}, job: Input{Host: HostSandbox, Security: SecurityFull}, wantSecurity: SecurityDeny, wantAsk: AskOnMiss},
		{name: "unset worker, worker host", worker: Policy{}, job: Input{Host: HostWorker}, wantSecurity: SecurityAllowlist, wantAsk: AskOnMiss},
		{name: "unset worker, default host", worker: Policy{}, job: Input{}, wantSecurity: SecurityDeny, wantAsk: AskOnMiss},
		{name: "garbage worker security fails closed", worker: Policy{Security: "bogus", Ask: "bogus"}, job: Input{}, wantSecurity: SecurityDeny, wantAsk: AskAlways},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			job := tc.job
			eff := Effective(tc.worker, &job)
			require.Equal(t, tc.wantSecurity, eff.Security)
			require.Equal(t, tc.wantAsk, eff.Ask)
			require.Equal(t, tc.worker.Allowlist, eff.Allowlist)
			require.Equal(t, tc.worker.AllowWorkerHost, eff.AllowWorkerHost)
		})
	}
	// The effective allowlist is a copy: changing it does not touch the worker's.
	eff := Effective(worker, &Input{})
	eff.Allowlist[0] = "/tmp/evil"
	require.Equal(t, "/usr/bin/ls", worker.Allowlist[0])
}

func TestApproveAlwaysAllowlists(t *testing.T) {
	t.Parallel()
	b := setupPolicy(t)
	in := &Input{Command: "rm -rf x | sort -o y"}
	in.ApplyDefaults()
	d := Evaluate(b.policy, in)
	require.Equal(t, NeedsApproval, d.Outcome)
	require.Equal(t, []string{b.bin + "/rm", b.bin + "/sort"}, d.Unlisted)

	wider := b.policy.WithAllowed(append(d.Unlisted, "relative", b.bin+"/xargs", b.bin+"/rm")...)
	require.Len(t, b.policy.Allowlist, len(wider.Allowlist)-2, "the original policy is not changed")
	require.Equal(t, Allow, Evaluate(wider, in).Outcome)
	in = &Input{Command: "ls | xargs rm"}
	in.ApplyDefaults()
	require.Equal(t, NeedsApproval, Evaluate(wider, in).Outcome, "a wrapper never passes")
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	bad := []Policy{
		{Security: "bogus"},
		{Ask: "sometimes"},
		{Allowlist: []string{"ls"}},
		{Allowlist: []string{"/usr/bin/../bin/ls"}},
		{SafeBins: []string{"env"}},
		{SafeBins: []string{"/usr/bin/xargs"}},
		{SafeBins: []string{"bin/grep"}},
		{Path: []string{"bin"}},
		{WorkdirRoots: []string{"work"}},
		{DefaultWorkdir: "rel"},
		{EnvAllow: []string{""}},
		{EnvAllow: []string{"1A"}},
		{EnvAllow: []string{"A*B"}},
		{EnvAllow: []string{"*A"}},
		{EnvAllow: []string{"A-B"}},
		{EnvAllow: []string{"PATH"}},
		{EnvAllow: []string{"path"}},
		{EnvAllow: []string{"LD_PRELOAD"}},
		{EnvAllow: []string{"LD_*"}},
		{EnvAllow: []string{"DYLD_*"}},
		{EnvAllow: []string{"BASH_ENV"}},
		{EnvAllow: []string{"BASH_FUNC_*"}},
	}
	for _, p := range bad {
		require.Error(t, p.Validate(), "%+v", p)
	}
	good := Policy{
		Security: SecurityAllowlist, Allowlist: []string{"/usr/bin/ls"}, SafeBins: []string{"grep", "/usr/bin/wc"},
		EnvAllow: []string{"GIT_SSH_COMMAND", "MYAPP_*", "L*", "*"},
	}
	require.NoError(t, good.Validate())
}

func TestDecodeInput(t *testing.T) {
	t.Parallel()
	in, err := DecodeInput([]byte(`{"command":"ls -la"}`))
	require.NoError(t, err)
	require.Equal(t, HostSandbox, in.Host)
	require.Equal(t, DefaultTimeoutSeconds, in.Timeout)
	require.NotNil(t, in.YieldMs)
	require.Equal(t, DefaultYieldMs, *in.YieldMs)
	require.Equal(t, Security(""), in.Security, "an unset mode means the worker's")

	in, err = DecodeInput([]byte(`{"command":"ls","workdir":"/w","env":{"A":"1"},"timeout":5,"security":"allowlist","ask":"always","host":"worker","background":true,"yieldMs":0}`))
	require.NoError(t, err)
	require.Equal(t, 5, in.Timeout)
	require.Equal(t, 0, *in.YieldMs)
	require.True(t, in.Background)

	bad := map[string]string{
		"empty":            ``,
		"null":             `null`,
		"not an object":    `[1]`,
		"no command":       `{}`,
		"blank command":    `{"command":"  "}`,
		"unknown field":    `{"command":"ls","shell":"zsh"}`,
		"trailing":         `{"command":"ls"} {}`,
		"relative workdir": `{"command":"ls","workdir":"w"}`,
		"negative timeout": `{"command":"ls","timeout":-1}`,
		"huge timeout":     `{"command":"ls","timeout":100000000}`,
		"bad security":     `{"command":"ls","security":"none"}`,
		"bad ask":          `{"command":"ls","ask":"maybe"}`,
		"bad host":         `{"command":"ls","host":"gateway"}`,
		"bad env name":     `{"command":"ls","env":{"BASH_FUNC_ls%%":"() { id; }"}}`,
		"env name digit":   `{"command":"ls","env":{"1A":"x"}}`,
		"env NUL":          `{"command":"ls","env":{"A":"a\u0000b"}}`,
		"command NUL":      `{"command":"ls\u0000"}`,
		"pty":              `{"command":"ls","pty":true}`,
		"node":             `{"command":"ls","node":"mac-1"}`,
		"negative yield":   `{"command":"ls","yieldMs":-5}`,
		"command too long": `{"command":"` + strings.Repeat("a", MaxCommandBytes+1) + `"}`,
	}
	for name, raw := range bad {
		_, err := DecodeInput([]byte(raw))
		require.Error(t, err, name)
		require.ErrorIs(t, err, contracts.ErrInvalidInput, name)
	}
}
