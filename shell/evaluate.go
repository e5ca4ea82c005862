package shell

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Outcome is what the policy says about a command.
type Outcome string

// Outcomes, from most to least permissive.
const (
	// Allow: run it now.
	Allow Outcome = "allow"
	// NeedsApproval: park the job as approval_pending until a person decides.
	NeedsApproval Outcome = "approval_required"
	// Deny: refuse it (a denied event with Reason, not an error).
	Deny Outcome = "deny"
)

// Decision is the result of Evaluate. It is data: the bus layer turns Deny
// into a denied event, NeedsApproval into an Approval record, and Allow into
// a Plan.
type Decision struct {
	Outcome Outcome `json:"outcome"`
	// Reason explains a Deny or NeedsApproval in one line.
	Reason string `json:"reason,omitempty"`
	// Misses lists every allowlist miss (a person approving sees them all).
	Misses []string `json:"misses,omitempty"`
	// Argv holds the resolved argv of every simple command that resolved,
	// in source order; the first word is an absolute path.
	Argv [][]string `json:"argv,omitempty"`
	// Binaries are the resolved absolute paths of the commands.
	Binaries []string `json:"binaries,omitempty"`
	// Unlisted are resolved binaries that were neither allowlisted nor
	// accepted as safe bins. An "approve --always" adds their exact argvs,
	// not the binaries (AlwaysEntries).
	Unlisted []string `json:"unlisted,omitempty"`
	// Script is the shell text to run. When every command resolved to a
	// literal argv it is rebuilt from Argv (absolute paths, single-quoted
	// words), so what runs is exactly what was checked; otherwise it is the
	// command as given.
	Script string `json:"script,omitempty"`
	// Workdir is the resolved workdir; empty means a private scratch
	// directory.
	Workdir string `json:"workdir,omitempty"`
	// Security and Ask are the effective modes the decision was made under.
	Security Security `json:"security"`
	Ask      Ask      `json:"ask"`
}

// Evaluate decides what to do with a job's command under policy p (which
// should come from Effective; the job's own security and ask are applied
// again here, and can only tighten). It never returns an error: a refusal
// is a Deny decision with a reason.
func Evaluate(p Policy, in *Input) Decision {
	if in == nil {
		in = &Input{}
	}
	if p.Security == "" {
		p.Security = DefaultSecurity(in.Host)
	}
	if p.Ask == "" {
		p.Ask = AskOnMiss
	}
	// Tighten by the job again, so a caller that skips Effective cannot
	// loosen anything by mistake.
	if securityRank(p.Security) >= 0 {
		p.Security = StricterSecurity(p.Security, in.Security)
	}
	if askRank(p.Ask) >= 0 {
		p.Ask = StricterAsk(p.Ask, in.Ask)
	}
	d := Decision{Security: p.Security, Ask: p.Ask}
	deny := func(format string, args ...any) Decision {
		d.Outcome, d.Reason = Deny, fmt.Sprintf(format, args...)
		d.Script = ""
		return d
	}
	if securityRank(p.Security) < 0 || askRank(p.Ask) < 0 {
		return deny("invalid policy (security %q, ask %q)", p.Security, p.Ask)
	}
	if strings.TrimSpace(in.Command) == "" {
		return deny("empty command")
	}
	if strings.IndexByte(in.Command, 0) >= 0 || len(in.Command) > MaxCommandBytes {
		return deny("command has a NUL byte or is longer than %d bytes", MaxCommandBytes)
	}
	host := in.Host
	if host == "" {
		host = HostSandbox
	}
	switch host {
	case HostSandbox:
	case HostWorker:
		if !p.AllowWorkerHost {
			return deny("host=worker is not allowed by this worker's policy")
		}
	default:
		return deny("unknown host %q", clip(string(host)))
	}
	if in.Elevated {
		return deny("elevated mode is not available")
	}
	if why := p.envRefusal(in.Env); why != "" {
		return deny("%s", why)
	}
	wd, why := p.resolveWorkdir(in.Workdir)
	if why != "" {
		return deny("%s", why)
	}
	d.Workdir = wd

	if p.Security == SecurityDeny {
		return deny("security=deny refuses every command")
	}

	file, perr := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(in.Command), "")
	if p.Security == SecurityFull {
		d.Script = in.Command
		if perr == nil {
			a := newAnalysis(&p)
			a.file(file)
			d.Argv, d.Binaries = a.argv, a.bins
		}
		if p.Ask == AskAlways {
			d.Outcome, d.Reason = NeedsApproval, "ask=always"
			return d
		}
		d.Outcome = Allow
		return d
	}

	// Allowlist mode.
	if perr != nil {
		return deny("command does not parse: %v", perr)
	}
	a := newAnalysis(&p)
	script := a.file(file)
	d.Argv, d.Binaries, d.Unlisted, d.Misses = a.argv, a.bins, a.unlisted, a.misses
	if len(a.refusals) > 0 {
		d.Argv, d.Binaries, d.Unlisted = nil, nil, nil
		return deny("%s", strings.Join(a.refusals, "; "))
	}
	if a.canonical {
		d.Script = script
	} else {
		d.Script = in.Command
	}
	switch {
	case len(a.misses) > 0 && p.Ask == AskOff:
		return deny("allowlist miss: %s", strings.Join(a.misses, "; "))
	case len(a.misses) > 0:
		d.Outcome, d.Reason = NeedsApproval, "allowlist miss: "+strings.Join(a.misses, "; ")
	case p.Ask == AskAlways:
		d.Outcome, d.Reason = NeedsApproval, "ask=always"
	default:
		d.Outcome = Allow
	}
	return d
}

// evalBuiltins run text or files as shell code, or change how names
// resolve; they are refused in allowlist mode unless AllowEvalBuiltins.
var evalBuiltins = map[string]bool{
	"eval": true, "source": true, ".": true, "exec": true, "command": true, "builtin": true,
	"trap": true, "enable": true, "hash": true, "fc": true, "alias": true, "unalias": true,
	"let": true, "mapfile": true, "readarray": true, "coproc": true,
}

// wrappers run another command given in their arguments (or are
// interpreters); they never pass on their own: an allowlist entry for one
// would launder anything. Binaries that can run other programs only with
// some arguments have an argument rule instead (argRules).
var wrappers = map[string]bool{
	"env": true, "sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true,
	"fish": true, "csh": true, "tcsh": true, "busybox": true, "xargs": true, "nice": true,
	"nohup": true, "timeout": true, "sudo": true, "doas": true, "su": true, "runuser": true,
	"setsid": true, "stdbuf": true, "chroot": true, "unshare": true, "nsenter": true,
	"flock": true, "ionice": true, "taskset": true, "chrt": true, "prlimit": true,
	"numactl": true, "strace": true, "ltrace": true, "gdb": true, "time": true, "watch": true,
	"script": true, "parallel": true, "systemd-run": true, "bwrap": true,
	"firejail": true, "awk": true, "gawk": true, "mawk": true, "nawk": true,
	"perl": true, "python": true, "python3": true, "ruby": true, "node": true,
	"php": true, "lua": true, "tclsh": true, "expect": true, "toybox": true,
	"faketime": true, "catchsegv": true, "valgrind": true, "pkexec": true, "sg": true,
	"newgrp": true, "setpriv": true, "capsh": true, "ld.so": true, "tmux": true, "screen": true,
}

func isWrapper(base string) bool {
	if wrappers[base] {
		return true
	}
	// Versioned interpreters (python3.12, perl5.36) and loaders (ld-linux-x86-64.so.2).
	for _, p := range []string{"python", "perl", "ruby", "php", "lua", "node", "ld-linux", "ld.so"} {
		if strings.HasPrefix(base, p) {
			return true
		}
	}
	return false
}

type analysis struct {
	p         *Policy
	allow     map[string]bool            // binaries allowed with any arguments
	exact     map[string][][]string      // binaries allowed with exactly these arguments
	argAllow  map[string]map[string]bool // resolved path → waived argument rules
	safe      map[string]string          // resolved path → safe-bin name
	refusals  []string
	misses    []string
	argv      [][]string
	bins      []string
	unlisted  []string
	canonical bool
	looked    map[string]string // name → resolved path ("" when not found)
	real      map[string]string // resolved path → base name of its target
}

func newAnalysis(p *Policy) *analysis {
	a := &analysis{
		p: p, allow: map[string]bool{}, safe: map[string]string{}, canonical: true,
		looked: map[string]string{}, real: map[string]string{}, argAllow: map[string]map[string]bool{},
		exact: map[string][][]string{},
	}
	for _, e := range p.Allowlist {
		ent, err := parseAllowEntry(e)
		switch {
		case err != nil:
			// Validate refuses it; an entry that does not parse allows nothing.
		case ent.any:
			a.allow[ent.path] = true
		default:
			a.exact[ent.path] = append(a.exact[ent.path], ent.args)
		}
	}
	for _, w := range p.ArgAllow {
		if a.argAllow[w.Path] == nil {
			a.argAllow[w.Path] = map[string]bool{}
		}
		for _, r := range w.Rules {
			a.argAllow[w.Path][r] = true
		}
	}
	for _, s := range p.SafeBins {
		if filepath.IsAbs(s) {
			a.safe[s] = filepath.Base(s)
		} else if r, ok := p.LookPath(s); ok {
			a.safe[r] = s
		}
	}
	return a
}

func (a *analysis) refuse(allowed bool, what string) {
	if allowed {
		a.noncanonical(what + " (allowed by policy only with approval)")
		return
	}
	r := what + " is refused in allowlist mode"
	if !slices.Contains(a.refusals, r) {
		a.refusals = append(a.refusals, r)
	}
	a.canonical = false
}

func (a *analysis) miss(why string) {
	if !slices.Contains(a.misses, why) {
		a.misses = append(a.misses, why)
	}
}

func (a *analysis) noncanonical(why string) {
	a.miss(why)
	a.canonical = false
}

// file checks the whole tree for refused constructs, then the top-level
// statements for misses, and returns the canonical script.
func (a *analysis) file(f *syntax.File) string {
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CmdSubst:
			a.refuse(a.p.AllowSubstitution, "command substitution")
		case *syntax.ProcSubst:
			a.refuse(a.p.AllowSubstitution, "process substitution")
		case *syntax.Subshell:
			a.refuse(a.p.AllowSubshell, "subshell")
		case *syntax.Redirect:
			if n.Op == syntax.Hdoc || n.Op == syntax.DashHdoc || n.Op == syntax.WordHdoc {
				a.refuse(a.p.AllowHeredoc, "here-document")
			}
		case *syntax.CoprocClause:
			a.refuse(a.p.AllowEvalBuiltins, "coproc")
		case *syntax.LetClause:
			a.refuse(a.p.AllowEvalBuiltins, "let")
		case *syntax.DeclClause:
			for _, as := range n.Args {
				if as.Name != nil && EnvRefusal(as.Name.Value) != "" {
					a.refuse(false, fmt.Sprintf("assignment to %s", as.Name.Value))
				}
			}
		case *syntax.CallExpr:
			for _, as := range n.Assigns {
				if as.Name != nil && EnvRefusal(as.Name.Value) != "" {
					a.refuse(false, fmt.Sprintf("inline assignment to %s", as.Name.Value))
				}
			}
			if len(n.Args) > 0 {
				a.commandName(n.Args[0])
			}
		}
		return true
	})
	var b strings.Builder
	for i, st := range f.Stmts {
		if i > 0 {
			b.WriteString("; ")
		}
		a.stmt(&b, st)
	}
	if len(f.Stmts) == 0 {
		a.noncanonical("empty command")
	}
	return b.String()
}

// commandName refuses eval-like builtins and dynamic command names wherever
// they appear, even inside constructs that are only a miss.
func (a *analysis) commandName(w *syntax.Word) {
	name, kind := literal(w)
	switch kind {
	case wordLiteral:
		if evalBuiltins[name] {
			a.refuse(a.p.AllowEvalBuiltins, fmt.Sprintf("shell builtin %q", name))
		}
	case wordExpansion:
		a.refuse(a.p.AllowDynamicCommand, "expansion in command position")
	case wordGlob:
		a.refuse(a.p.AllowDynamicCommand, "glob or brace expansion in command name")
	default:
		a.noncanonical("command name is not a plain word")
	}
}

func (a *analysis) stmt(b *strings.Builder, st *syntax.Stmt) {
	if st.Negated {
		b.WriteString("! ")
	}
	if st.Background || st.Coprocess || st.Disown {
		a.noncanonical("background execution (&)")
	}
	for _, r := range st.Redirs {
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc, syntax.WordHdoc:
			a.canonical = false // refused by the walk
		default:
			a.noncanonical("redirections are not supported in allowlist mode")
		}
	}
	switch c := st.Cmd.(type) {
	case *syntax.CallExpr:
		a.call(b, c)
	case *syntax.BinaryCmd:
		var op string
		switch c.Op {
		case syntax.AndStmt:
			op = " && "
		case syntax.OrStmt:
			op = " || "
		case syntax.Pipe:
			op = " | "
		default:
			a.noncanonical("|& (stderr into a pipe) is a redirection")
			op = " |& "
		}
		a.stmt(b, c.X)
		b.WriteString(op)
		a.stmt(b, c.Y)
	case nil:
		a.noncanonical("statement without a command")
	default:
		a.noncanonical(fmt.Sprintf("%s is not supported in allowlist mode", constructName(c)))
	}
}

func constructName(c syntax.Command) string {
	switch c.(type) {
	case *syntax.Subshell:
		return "a subshell"
	case *syntax.Block:
		return "a { … } group"
	case *syntax.IfClause:
		return "if"
	case *syntax.WhileClause:
		return "while/until"
	case *syntax.ForClause:
		return "for"
	case *syntax.CaseClause:
		return "case"
	case *syntax.FuncDecl:
		return "a function definition"
	case *syntax.ArithmCmd:
		return "(( … ))"
	case *syntax.TestClause:
		return "[[ … ]]"
	case *syntax.DeclClause:
		return "a declaration builtin"
	case *syntax.LetClause:
		return "let"
	case *syntax.TimeClause:
		return "time"
	case *syntax.CoprocClause:
		return "coproc"
	}
	return fmt.Sprintf("%T", c)
}

// call resolves one simple command (one pipeline segment) and renders it
// into b.
func (a *analysis) call(b *strings.Builder, c *syntax.CallExpr) {
	if len(c.Assigns) > 0 {
		if len(c.Args) == 0 {
			a.noncanonical("variable assignment")
			return
		}
		a.noncanonical("environment assignment before a command")
	}
	name, kind := literal(c.Args[0])
	if kind != wordLiteral {
		a.canonical = false
		a.miss("command name is not a literal word")
		return
	}
	var resolved string
	switch {
	case name == "":
		a.noncanonical("empty command name")
		return
	case strings.Contains(name, "/"):
		if !cleanAbs(name) {
			a.noncanonical(fmt.Sprintf("%q is not a clean absolute path (relative paths are not looked up)", clip(name)))
			return
		}
		if !executable(name) {
			a.noncanonical(fmt.Sprintf("%q is not an executable file", clip(name)))
			return
		}
		resolved = name
	default:
		r, ok := a.lookPath(name)
		if !ok {
			a.noncanonical(fmt.Sprintf("%q is not found on the fixed PATH (or is a shell builtin)", clip(name)))
			return
		}
		resolved = r
	}
	argv := []string{resolved}
	literalArgs := true
	for _, w := range c.Args[1:] {
		s, k := literal(w)
		switch k {
		case wordLiteral:
			argv = append(argv, s)
		case wordGlob:
			literalArgs = false
			a.noncanonical(fmt.Sprintf("%s: glob, brace or tilde expansion in arguments", filepath.Base(resolved)))
		case wordExpansion:
			literalArgs = false
			a.noncanonical(fmt.Sprintf("%s: expansion in arguments", filepath.Base(resolved)))
		default:
			literalArgs = false
			a.noncanonical(fmt.Sprintf("%s: argument is not a plain word", filepath.Base(resolved)))
		}
	}
	a.bins = appendUnique(a.bins, resolved)
	if literalArgs {
		a.argv = append(a.argv, argv)
	}

	base := filepath.Base(resolved)
	realBase := a.realBase(resolved)
	switch {
	case isWrapper(base) || isWrapper(realBase) || evalBuiltins[base]:
		a.miss(fmt.Sprintf("%s runs another command; its inner command is not checked", resolved))
	case a.allow[resolved] || literalArgs && a.allowed(resolved, argv[1:]):
		if !literalArgs {
			break // already a miss
		}
		for _, h := range argHits(base, realBase, argv[1:], a.argAllow[resolved]) {
			a.miss(fmt.Sprintf("%s: %s (argument rule %q; an operator can allow it with argAllow)", resolved, h.why, h.rule))
		}
	case a.safe[resolved] != "":
		if !literalArgs {
			a.unlisted = appendUnique(a.unlisted, resolved)
			break
		}
		if why := checkSafeArgs(base, argv[1:]); why != "" {
			a.miss(fmt.Sprintf("safe bin %s: %s", base, why))
			a.unlisted = appendUnique(a.unlisted, resolved)
		}
	default:
		a.miss(fmt.Sprintf("%s is not on the allowlist", resolved))
		a.unlisted = appendUnique(a.unlisted, resolved)
	}
	for i, s := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(quote(s))
	}
}

func (a *analysis) lookPath(name string) (string, bool) {
	if r, ok := a.looked[name]; ok {
		return r, r != ""
	}
	r, _ := a.p.LookPath(name)
	a.looked[name] = r
	return r, r != ""
}

// realBase is the base name of the file a resolved path links to. A link
// to a wrapper is a wrapper. Busybox applets are links to one multi-call
// binary that picks the applet by name: they are judged by their name.
func (a *analysis) realBase(resolved string) string {
	if r, ok := a.real[resolved]; ok {
		return r
	}
	base := filepath.Base(resolved)
	if rp, err := filepath.EvalSymlinks(resolved); err == nil && filepath.Base(rp) != "busybox" {
		base = filepath.Base(rp)
	}
	a.real[resolved] = base
	return base
}

func appendUnique(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
}

// quote renders s as one single-quoted shell word, read the same way by
// every POSIX shell.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

type wordKind int

const (
	wordLiteral   wordKind = iota // a fixed string
	wordGlob                      // unquoted *, ?, [..], {..}, ~, extglob
	wordExpansion                 // $var, $(…), $((…)), <(…), $'…', $"…"
)

// literal returns the value of w when it is a fixed string, as the shell
// would see it after quote removal.
func literal(w *syntax.Word) (string, wordKind) {
	var b strings.Builder
	kind := wordLiteral
	worse := func(k wordKind) {
		if k > kind {
			kind = k
		}
	}
	for i, part := range w.Parts {
		switch p := part.(type) {
		case *syntax.Lit:
			s, glob := unquotedLit(p.Value, i == 0)
			if glob {
				worse(wordGlob)
			}
			b.WriteString(s)
		case *syntax.SglQuoted:
			if p.Dollar {
				worse(wordExpansion)
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			if p.Dollar {
				worse(wordExpansion)
			}
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					worse(wordExpansion)
					continue
				}
				b.WriteString(dblQuotedLit(l.Value))
			}
		case *syntax.ExtGlob, *syntax.BraceExp:
			worse(wordGlob)
		default:
			worse(wordExpansion)
		}
	}
	return b.String(), kind
}

// unquotedLit removes backslash quoting and reports unescaped glob, brace
// or tilde characters.
func unquotedLit(s string, first bool) (string, bool) {
	var b strings.Builder
	glob := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '\\':
			if i+1 < len(s) {
				i++
				if s[i] != '\n' {
					b.WriteByte(s[i])
				}
			}
			continue
		case '*', '?', '{', '}':
			glob = true
		case '[':
			if strings.IndexByte(s[i+1:], ']') >= 0 {
				glob = true
			}
		case '~':
			if first && i == 0 || i > 0 && (s[i-1] == '=' || s[i-1] == ':') {
				glob = true
			}
		}
		b.WriteByte(c)
	}
	return b.String(), glob
}

// dblQuotedLit removes the backslashes that quote $ ` " \ and newline inside
// double quotes.
func dblQuotedLit(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case '$', '`', '"', '\\':
				b.WriteByte(s[i+1])
				i++
				continue
			case '\n':
				i++
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}
