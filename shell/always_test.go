package shell

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAllowlistExactEntries: a command-line entry allows exactly its argv;
// a bare path still allows any arguments; argument rules and the wrapper
// check apply to both.
func TestAllowlistExactEntries(t *testing.T) {
	t.Parallel()
	b := setupArgRules(t)
	bin := func(n string) string { return filepath.Join(b.bin, n) }
	p := b.policy
	p.SafeBins = []string{"grep", "wc", "sort"}
	p.Allowlist = []string{
		bin("ls"),
		"'" + bin("grep") + "' root /etc/passwd",
		bin("rm") + " -f x",
		"'" + bin("curl") + "'",
		"'" + bin("sort") + "' -o out",
		"'" + bin("tar") + "' -xf x.tar --to-command=sh",
		"'" + bin("xargs") + "' rm",
		"'" + bin("grep") + "' 'a b' '*.go'",
	}
	require.NoError(t, p.Validate())
	cases := []struct {
		cmd  string
		want Outcome
	}{
		{cmd: "ls -la /", want: Allow},
		{cmd: "grep root /etc/passwd", want: Allow},
		{cmd: "grep 'a b' '*.go'", want: Allow},
		{cmd: "cat | grep -r root", want: NeedsApproval},
		{cmd: "grep root /etc/shadow", want: NeedsApproval},
		{cmd: "grep -r root /", want: NeedsApproval},
		{cmd: "grep root /etc/passwd extra", want: NeedsApproval},
		{cmd: "grep root", want: Allow}, // stdin-only, a safe bin
		{cmd: "rm -f x", want: Allow},
		{cmd: "rm -f x y", want: NeedsApproval},
		{cmd: "rm -rf /", want: NeedsApproval},
		{cmd: "rm", want: NeedsApproval},
		{cmd: "curl", want: Allow},
		{cmd: "curl https://example.com/", want: NeedsApproval},
		{cmd: "sort -o out", want: Allow},
		{cmd: "sort -o other", want: NeedsApproval},
		{cmd: "tar -xf x.tar --to-command=sh", want: NeedsApproval}, // the argument rule still applies
		{cmd: "ls | xargs rm", want: NeedsApproval},                 // and so does the wrapper check
		{cmd: "grep root /etc/passwd > out", want: NeedsApproval},   // and every other miss
	}
	for _, tc := range cases {
		t.Run(tc.cmd, func(t *testing.T) {
			t.Parallel()
			in := &Input{Command: tc.cmd}
			in.ApplyDefaults()
			d := Evaluate(p, in)
			require.Equal(t, tc.want, d.Outcome, "reason: %s", d.Reason)
		})
	}
}

func TestAllowlistEntryValidate(t *testing.T) {
	t.Parallel()
	bad := []string{
		"", "ls", "'ls' -l", "/usr/bin/../bin/ls", "'/usr/bin/ls", "/usr/bin/ls > x", "/usr/bin/ls; /usr/bin/rm",
		"A=1 /usr/bin/ls", "/usr/bin/ls $HOME", "/usr/bin/ls *.go", "/usr/bin/ls ~", "! /usr/bin/ls", "/usr/bin/ls &",
		"/usr/bin/ls | /usr/bin/wc", "/usr/bin/ls $(id)", "/usr/bin/ls\x00",
	}
	for _, e := range bad {
		p := Policy{Allowlist: []string{e}}
		require.Error(t, p.Validate(), "%q", e)
	}
	good := []string{"/usr/bin/ls", "'/usr/bin/ls'", "/usr/bin/git status", "'/usr/bin/grep' 'a b' '*.go' \"x\" y\\ z"}
	for _, e := range good {
		p := Policy{Allowlist: []string{e}}
		require.NoError(t, p.Validate(), "%q", e)
	}
}

// TestExactEntryRoundTrip: exactEntry renders any argv so that it parses
// back to the same argv, never as a bare (any-argument) path.
func TestExactEntryRoundTrip(t *testing.T) {
	t.Parallel()
	for _, argv := range [][]string{
		{"/usr/bin/date"},
		{"/usr/bin/seq", "2"},
		{"/usr/bin/grep", "root", "/etc/passwd"},
		{"/usr/bin/git", "log", "--oneline", "--format=%h %s"},
		{"/opt/my tools/x", "", "*", "~x", "$HOME", "a;b", "-", "--x=y", "it's", "a\nb", "ü", `\`, "!", "#x"},
	} {
		e := exactEntry(argv)
		ent, err := parseAllowEntry(e)
		require.NoError(t, err, e)
		require.False(t, ent.any, e)
		require.Equal(t, argv[0], ent.path, e)
		require.Equal(t, argv[1:], append([]string{}, ent.args...), e)
	}
	require.Equal(t, "'/usr/bin/seq' 2", exactEntry([]string{"/usr/bin/seq", "2"}))
	require.Equal(t, "'/usr/bin/git' log --oneline '--format=%h %s'", exactEntry([]string{"/usr/bin/git", "log", "--oneline", "--format=%h %s"}))
}

// TestAlwaysEntries: approving "always" adds the approved argvs exactly,
// not their binaries; wrappers and argument-rule hits stay with a person.
// Before, approving grep root /etc/passwd allowlisted grep with any
// arguments.
func TestAlwaysEntries(t *testing.T) {
	t.Parallel()
	b := setupArgRules(t)
	bin := func(n string) string { return filepath.Join(b.bin, n) }
	p := b.policy
	p.SafeBins = []string{"grep", "wc"}
	p.Shell = "sh"
	in := &Input{Command: "grep root /etc/passwd | wc -l && rm -rf build; ls | xargs echo; git -c x=y log; rm -rf build; curl -s 'a b'"}
	in.ApplyDefaults()
	d := Evaluate(p, in)
	require.Equal(t, NeedsApproval, d.Outcome)
	plan, err := NewPlan(p, in, &d)
	require.NoError(t, err)

	al := AlwaysEntries(p, plan)
	require.Equal(t, []string{
		"'" + bin("grep") + "' root /etc/passwd",
		"'" + bin("rm") + "' -rf build",
		"'" + bin("curl") + "' -s 'a b'",
	}, al.Entries)
	require.Equal(t, []string{
		bin("xargs") + " echo: runs another command",
		bin("git") + ` -c x=y log: argument rule "git -c"`,
	}, al.Kept)
	desc := al.String()
	require.Contains(t, desc, "always allow exactly")
	require.Contains(t, desc, "'"+bin("grep")+"' root /etc/passwd")
	require.Contains(t, desc, "still ask every time")
	require.Contains(t, desc, `argument rule "git -c"`)

	wider := p.WithAllowed(al.Entries...)
	require.Len(t, wider.Allowlist, len(p.Allowlist)+3)
	require.NoError(t, wider.Validate())
	for cmd, want := range map[string]Outcome{
		"grep root /etc/passwd":  Allow,
		"grep -r root /":         NeedsApproval,
		"grep root /etc/shadow":  NeedsApproval,
		"rm -rf build":           Allow,
		"rm -rf /":               NeedsApproval,
		"curl -s 'a b'":          Allow,
		"curl -s https://x.test": NeedsApproval,
		"git -c x=y log":         NeedsApproval,
		"ls | xargs echo":        NeedsApproval,
	} {
		in := &Input{Command: cmd}
		in.ApplyDefaults()
		require.Equal(t, want, Evaluate(wider, in).Outcome, cmd)
	}
	require.Equal(t, wider.Allowlist, wider.WithAllowed(al.Entries...).Allowlist, "adding again adds nothing")

	// A policy under which everything passes adds nothing.
	require.Equal(t, "nothing is added to the allowlist", AlwaysEntries(wider, &Plan{Argv: [][]string{{bin("ls"), "-l"}}}).String())
	require.Empty(t, AlwaysEntries(p, nil).Entries)

	// Not allowlisted and hitting a rule: an exact entry would not pass either.
	q := p
	q.Allowlist = nil
	al = AlwaysEntries(q, &Plan{Argv: [][]string{{bin("tar"), "-xf", "x.tar", "--to-command=sh"}, {bin("tar"), "-xf", "x.tar"}}})
	require.Equal(t, []string{"'" + bin("tar") + "' -xf x.tar"}, al.Entries)
	require.Len(t, al.Kept, 1)
}
