package shell

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// DefaultPath is the fixed PATH commands resolve through when the worker
// configures none (the contract's Linux daemon PATH).
var DefaultPath = []string{"/usr/local/bin", "/usr/bin", "/bin"}

// DefaultShell runs the command text. Commands are parsed as bash, so they
// are run by bash.
const DefaultShell = "bash"

// Policy is the exec policy of a worker, from its config (and later the
// toolq_exec_policy KV bucket). A job can only make it stricter: see
// Effective.
type Policy struct {
	// Security is the mode; empty means DefaultSecurity(host): deny for the
	// sandbox, allowlist for the worker host (the exec contract).
	Security Security `json:"security,omitempty"`
	// Ask is when to ask a person; empty means on-miss.
	Ask Ask `json:"ask,omitempty"`
	// Allowlist holds absolute paths of binaries that may run with any
	// arguments ("/usr/bin/ls"), and command lines of fixed words that
	// allow exactly that argv ("/usr/bin/git status", "'/usr/bin/date'";
	// an entry with whitespace, a quote or a backslash is a command line).
	// Matching is on the path resolved through Path, never on a base name.
	// Argument rules apply to both kinds (see ArgAllow).
	Allowlist []string `json:"allowlist,omitempty"`
	// SafeBins are stdin-only binaries (names resolved through Path, or
	// absolute paths) that may run without an allowlist entry as long as
	// they get no file argument and no writing, recursing or file-reading
	// flag.
	SafeBins []string `json:"safeBins,omitempty"`
	// Path is the fixed PATH; empty means DefaultPath.
	Path []string `json:"path,omitempty"`
	// Shell runs the command (a name resolved through Path, or an absolute
	// path); empty means DefaultShell.
	Shell string `json:"shell,omitempty"`
	// AllowWorkerHost lets jobs run with host=worker.
	AllowWorkerHost bool `json:"allowWorkerHost,omitempty"`
	// WorkdirRoots are the directories a job's workdir must lie in. When
	// empty, only DefaultWorkdir is accepted.
	WorkdirRoots []string `json:"workdirRoots,omitempty"`
	// DefaultWorkdir is the workdir of a job that names none; empty means a
	// private scratch directory per run.
	DefaultWorkdir string `json:"defaultWorkdir,omitempty"`
	// EnvAllow adds to DefaultEnvAllow the environment variables a job may
	// set: names, name prefixes followed by "*" ("MYAPP_*"), or "*" for
	// every name. Any other override is refused in every mode and on both
	// hosts, and so are the names EnvRefusal refuses, listed or not.
	EnvAllow []string `json:"envAllow,omitempty"`
	// ArgAllow waives built-in argument rules for allowlisted binaries:
	// by default an allowlisted binary misses when its arguments make it
	// run another program (git -c, tar --to-command, find -exec, make, …).
	ArgAllow []ArgAllow `json:"argAllow,omitempty"`

	// The constructs below are refused outright in allowlist mode. Allowing
	// one lets a command that uses it go to a person for approval (ask
	// on-miss or always); it is never run without approval, since its argv
	// is not known before it runs.

	// AllowSubstitution allows $(…), `…`, <(…) and >(…).
	AllowSubstitution bool `json:"allowSubstitution,omitempty"`
	// AllowSubshell allows ( … ).
	AllowSubshell bool `json:"allowSubshell,omitempty"`
	// AllowEvalBuiltins allows eval, source, ., exec, command, builtin, …
	AllowEvalBuiltins bool `json:"allowEvalBuiltins,omitempty"`
	// AllowHeredoc allows here-documents and here-strings.
	AllowHeredoc bool `json:"allowHeredoc,omitempty"`
	// AllowDynamicCommand allows expansions and globs in command names.
	AllowDynamicCommand bool `json:"allowDynamicCommand,omitempty"`
}

// WithAllowed returns a copy of p with entries added to the allowlist:
// what an "approve --always" decision does with AlwaysEntries. Entries
// that do not parse, name a wrapper, or are there already are left out.
func (p Policy) WithAllowed(entries ...string) Policy {
	p.Allowlist = slices.Clone(p.Allowlist)
	for _, e := range entries {
		ent, err := parseAllowEntry(e)
		if err != nil || isWrapper(filepath.Base(ent.path)) || slices.Contains(p.Allowlist, e) {
			continue
		}
		p.Allowlist = append(p.Allowlist, e)
	}
	return p
}

// DefaultSecurity is the contract's default mode for a host: deny for the
// sandbox, allowlist for the worker host.
func DefaultSecurity(h Host) Security {
	if h == HostWorker {
		return SecurityAllowlist
	}
	return SecurityDeny
}

// Validate checks a worker policy once, at configuration time.
func (p *Policy) Validate() error {
	switch p.Security {
	case "", SecurityDeny, SecurityAllowlist, SecurityFull:
	default:
		return fmt.Errorf("shell policy: security %q: want deny, allowlist or full", p.Security)
	}
	switch p.Ask {
	case "", AskOff, AskOnMiss, AskAlways:
	default:
		return fmt.Errorf("shell policy: ask %q: want off, on-miss or always", p.Ask)
	}
	for _, a := range p.Allowlist {
		if _, err := parseAllowEntry(a); err != nil {
			return fmt.Errorf("shell policy: allowlist entry %q: %w", clip(a), err)
		}
	}
	for _, s := range p.SafeBins {
		if s == "" || strings.Contains(s, "/") && !cleanAbs(s) {
			return fmt.Errorf("shell policy: safe bin %q: want a name or a clean absolute path", s)
		}
		base := filepath.Base(s)
		_, profiled := safeProfiles[base]
		if isWrapper(base) || evalBuiltins[base] || hasArgRules(base) && !profiled {
			return fmt.Errorf("shell policy: %q runs other commands and cannot be a safe bin", s)
		}
	}
	for _, d := range p.Path {
		if !cleanAbs(d) {
			return fmt.Errorf("shell policy: PATH entry %q is not a clean absolute path", d)
		}
	}
	for _, d := range p.WorkdirRoots {
		if !cleanAbs(d) {
			return fmt.Errorf("shell policy: workdir root %q is not a clean absolute path", d)
		}
	}
	if p.DefaultWorkdir != "" && !cleanAbs(p.DefaultWorkdir) {
		return fmt.Errorf("shell policy: default workdir %q is not a clean absolute path", p.DefaultWorkdir)
	}
	for _, w := range p.ArgAllow {
		if err := validateArgAllow(w); err != nil {
			return fmt.Errorf("shell policy: argAllow: %w", err)
		}
	}
	for _, e := range p.EnvAllow {
		if err := validEnvPattern(e); err != nil {
			return fmt.Errorf("shell policy: envAllow entry %q: %w", e, err)
		}
	}
	return nil
}

// Effective returns the policy a job runs under: the worker's, made
// stricter by the job's security and ask. A job cannot widen anything: it
// cannot add allowlist entries or safe bins, loosen the mode, or turn on an
// Allow* flag. The result has Security and Ask resolved (never empty).
func Effective(worker Policy, job *Input) Policy {
	host := HostSandbox
	if job != nil && job.Host != "" {
		host = job.Host
	}
	p := worker
	p.Allowlist = slices.Clone(worker.Allowlist)
	p.SafeBins = slices.Clone(worker.SafeBins)
	p.Path = slices.Clone(worker.Path)
	p.WorkdirRoots = slices.Clone(worker.WorkdirRoots)
	p.EnvAllow = slices.Clone(worker.EnvAllow)
	p.ArgAllow = slices.Clone(worker.ArgAllow)
	if p.Security == "" {
		p.Security = DefaultSecurity(host)
	}
	if p.Ask == "" {
		p.Ask = AskOnMiss
	}
	if job != nil {
		p.Security = StricterSecurity(p.Security, job.Security)
		p.Ask = StricterAsk(p.Ask, job.Ask)
	}
	return p
}

// StricterSecurity returns the stricter of a and b; an empty or unknown
// value counts as no preference for b and as deny for a.
func StricterSecurity(a, b Security) Security {
	ra, rb := securityRank(a), securityRank(b)
	if ra < 0 {
		return SecurityDeny
	}
	if rb < 0 || ra <= rb {
		return a
	}
	return b
}

// StricterAsk returns the stricter of a and b; an empty or unknown value
// counts as no preference for b and as always for a.
func StricterAsk(a, b Ask) Ask {
	ra, rb := askRank(a), askRank(b)
	if ra < 0 {
		return AskAlways
	}
	if rb < 0 || ra >= rb {
		return a
	}
	return b
}

// securityRank orders modes by what they let run: deny 0 < allowlist 1 <
// full 2; -1 for anything else.
func securityRank(s Security) int {
	switch s {
	case SecurityDeny:
		return 0
	case SecurityAllowlist:
		return 1
	case SecurityFull:
		return 2
	}
	return -1
}

// askRank orders modes by strictness: off 0 < on-miss 1 < always 2.
func askRank(a Ask) int {
	switch a {
	case AskOff:
		return 0
	case AskOnMiss:
		return 1
	case AskAlways:
		return 2
	}
	return -1
}

func (p *Policy) path() []string {
	if len(p.Path) == 0 {
		return DefaultPath
	}
	return p.Path
}

// PathEnv is the PATH value commands run with.
func (p *Policy) PathEnv() string { return strings.Join(p.path(), ":") }

// LookPath resolves name through the fixed PATH to an absolute path of an
// executable regular file. A name with a slash is not looked up.
func (p *Policy) LookPath(name string) (string, bool) {
	if name == "" || strings.Contains(name, "/") {
		return "", false
	}
	for _, dir := range p.path() {
		cand := filepath.Join(dir, name)
		if executable(cand) {
			return cand, true
		}
	}
	return "", false
}

// ResolveShell returns the absolute path of the policy's shell.
func (p *Policy) ResolveShell() (string, bool) {
	sh := p.Shell
	if sh == "" {
		sh = DefaultShell
	}
	if filepath.IsAbs(sh) {
		return sh, executable(sh)
	}
	return p.LookPath(sh)
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

func cleanAbs(p string) bool {
	return p != "" && filepath.IsAbs(p) && filepath.Clean(p) == p && strings.IndexByte(p, 0) < 0
}

// resolveWorkdir returns the workdir a job runs in ("" for a private
// scratch directory) or why it is refused.
func (p *Policy) resolveWorkdir(want string) (string, string) {
	if want == "" {
		want = p.DefaultWorkdir
		if want == "" {
			return "", ""
		}
	}
	if !filepath.IsAbs(want) {
		return "", fmt.Sprintf("workdir %q is not absolute", clip(want))
	}
	real, err := filepath.EvalSymlinks(filepath.Clean(want))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Sprintf("workdir %q does not exist", clip(want))
		}
		return "", fmt.Sprintf("workdir %q: %v", clip(want), err)
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.IsDir() {
		return "", fmt.Sprintf("workdir %q is not a directory", clip(want))
	}
	roots := p.WorkdirRoots
	if len(roots) == 0 && p.DefaultWorkdir != "" {
		roots = []string{p.DefaultWorkdir}
	}
	for _, r := range roots {
		rr, err := filepath.EvalSymlinks(r)
		if err != nil {
			continue
		}
		if within(real, rr) {
			return real, ""
		}
	}
	return "", fmt.Sprintf("workdir %q is outside the worker's workdir roots", clip(want))
}

func within(path, root string) bool {
	if root == "/" {
		return false // the whole file system is never a workdir root
	}
	rel, err := filepath.Rel(root, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}
