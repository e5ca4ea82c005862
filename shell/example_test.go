package shell_test

import (
	"fmt"
	"strings"

	"github.com/toolq/toolq/shell"
)

func ExampleEvaluate() {
	worker := shell.Policy{
		Security:  shell.SecurityAllowlist,
		Ask:       shell.AskOnMiss,
		Allowlist: []string{"/usr/bin/ls"},
		SafeBins:  []string{"wc"},
		Path:      []string{"/usr/bin"},
	}
	for _, cmd := range []string{
		"ls -la | wc -l",
		"ls > listing.txt",
		"ls $(cat dirs)",
	} {
		in := &shell.Input{Command: cmd, Security: shell.SecurityFull} // a job cannot widen the policy
		in.ApplyDefaults()
		d := shell.Evaluate(shell.Effective(worker, in), in)
		fmt.Println(strings.TrimSpace(fmt.Sprintf("%s [%s] %s", d.Outcome, d.Script, d.Reason)))
	}
	// Output:
	// allow ['/usr/bin/ls' '-la' | '/usr/bin/wc' '-l']
	// approval_required [ls > listing.txt] allowlist miss: redirections are not supported in allowlist mode
	// deny [] command substitution is refused in allowlist mode
}

func ExampleEnvRefusal() {
	for _, name := range []string{"LD_PRELOAD", "Path", "DYLD_INSERT_LIBRARIES", "GOFLAGS"} {
		fmt.Printf("%s refused: %v\n", name, shell.EnvRefusal(name) != "")
	}
	// Output:
	// LD_PRELOAD refused: true
	// Path refused: true
	// DYLD_INSERT_LIBRARIES refused: true
	// GOFLAGS refused: false
}

func ExamplePolicy_CheckEnv() {
	p := shell.Policy{EnvAllow: []string{"MYAPP_*"}}
	for _, name := range []string{"LC_ALL", "MYAPP_MODE", "GIT_SSH_COMMAND", "LD_PRELOAD"} {
		fmt.Printf("%s allowed: %v\n", name, p.CheckEnv(map[string]string{name: "x"}) == nil)
	}
	// Output:
	// LC_ALL allowed: true
	// MYAPP_MODE allowed: true
	// GIT_SSH_COMMAND allowed: false
	// LD_PRELOAD allowed: false
}

func ExampleAlwaysEntries() {
	worker := shell.Policy{Security: shell.SecurityAllowlist, Allowlist: []string{"/usr/bin/git"}, Path: []string{"/usr/bin"}}
	plan := &shell.Plan{Argv: [][]string{
		{"/usr/bin/grep", "root", "/etc/passwd"},
		{"/usr/bin/git", "-c", "core.pager=less", "log"},
	}}
	always := shell.AlwaysEntries(worker, plan)
	fmt.Println(always)
	fmt.Println(len(worker.WithAllowed(always.Entries...).Allowlist))
	// Output:
	// always allow exactly (the same binary with the same arguments):
	//   '/usr/bin/grep' root /etc/passwd
	// still ask every time:
	//   /usr/bin/git -c core.pager=less log: argument rule "git -c"
	// 2
}
