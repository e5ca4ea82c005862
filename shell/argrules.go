package shell

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// ArgAllow lets one allowlisted binary use argument forms that the
// built-in argument rules make a miss (see argRules): an operator's
// statement that, for this binary, the form is wanted.
type ArgAllow struct {
	// Path is the binary's absolute path, as in Policy.Allowlist.
	Path string `json:"path"`
	// Rules are the names of the rules to waive, as a miss shows them
	// ("git -c", "make"); "*" waives every rule of the binary. Wrappers
	// (env, shells, xargs, …) have no rules to waive: they never pass.
	Rules []string `json:"rules"`
}

// argHit is one argument form that makes an allowlisted argv a miss.
type argHit struct {
	rule string // the name ArgAllow uses
	why  string // what the form does
}

// argSpec is the argument rule of a binary (or a family of them): check
// returns the forms of args that let the binary run another program, or
// anything else an allowlist entry for the binary does not vouch for.
type argSpec struct {
	rules []string // every rule check can report
	check func(args []string) []argHit
}

// argRules maps a base name to its rule. The table is known-bad: a
// binary that is not in it passes with any arguments once allowlisted,
// so only binaries whose arguments are understood belong on an allowlist.
// Every check errs towards a miss: a word is looked at wherever it
// appears (after "--" or as another option's value too), a long option is
// matched by any abbreviation, and a form a check does not understand is
// a miss.
var argRules = map[string]*argSpec{}

// knownArgRules holds every rule name, for Policy.Validate.
var knownArgRules = map[string]bool{}

func register(spec *argSpec, names ...string) {
	for _, n := range names {
		argRules[n] = spec
	}
	for _, r := range spec.rules {
		knownArgRules[r] = true
	}
}

// argSpecFor finds the rule of a base name: exactly, without a version
// suffix (pip3.12, gcc-14), or as a cross compiler (x86_64-linux-gnu-gcc).
func argSpecFor(base string) *argSpec {
	if s := argRules[base]; s != nil {
		return s
	}
	if strings.HasPrefix(base, "vim") {
		return argRules["vim"]
	}
	n := strings.TrimSuffix(strings.TrimRight(base, "0123456789."), "-")
	if s := argRules[n]; s != nil {
		return s
	}
	if i := strings.LastIndexByte(n, '-'); i >= 0 && compilers[n[i+1:]] {
		return argRules[n[i+1:]]
	}
	return nil
}

// hasArgRules reports whether a base name has an argument rule.
func hasArgRules(base string) bool { return argSpecFor(base) != nil }

// argHits returns the rule hits of an argv of the binaries named base and
// realBase (the base name of what it links to), leaving out the rules
// waived. The hits are unique by rule, in the order found.
func argHits(base, realBase string, args []string, waived map[string]bool) []argHit {
	if waived["*"] {
		return nil
	}
	var hits []argHit
	seen := map[*argSpec]bool{}
	for _, name := range []string{base, realBase} {
		spec := argSpecFor(name)
		if spec == nil || seen[spec] {
			continue
		}
		seen[spec] = true
		for _, h := range spec.check(args) {
			if waived[h.rule] || slices.ContainsFunc(hits, func(o argHit) bool { return o.rule == h.rule }) {
				continue
			}
			hits = append(hits, h)
		}
	}
	return hits
}

// validateArgAllow checks one Policy.ArgAllow entry.
func validateArgAllow(a ArgAllow) error {
	switch {
	case !cleanAbs(a.Path):
		return fmt.Errorf("path %q is not a clean absolute path", a.Path)
	case isWrapper(filepath.Base(a.Path)):
		return fmt.Errorf("%s runs the command in its arguments; no rule can allow it", a.Path)
	case len(a.Rules) == 0:
		return fmt.Errorf("no rules")
	}
	for _, r := range a.Rules {
		if r != "*" && !knownArgRules[r] {
			return fmt.Errorf("unknown argument rule %q (known: %s)", r, strings.Join(ArgRuleNames(), ", "))
		}
	}
	return nil
}

// ArgRuleNames lists the names of the built-in argument rules, sorted:
// the names Policy.ArgAllow accepts.
func ArgRuleNames() []string {
	out := make([]string, 0, len(knownArgRules))
	for r := range knownArgRules {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// ---- building blocks ----

// whole makes every argv a miss but a lone version or help flag.
func whole(rule, why string, info ...string) *argSpec {
	return &argSpec{rules: []string{rule}, check: func(args []string) []argHit {
		if len(args) == 1 && slices.Contains(info, args[0]) {
			return nil
		}
		return []argHit{{rule, why}}
	}}
}

// optTable describes the dangerous options of a getopt-style command.
type optTable struct {
	// long are dangerous long options without "--"; a word "--x" or
	// "--x=v" hits when x is the name or an abbreviation of it.
	long []longOpt
	// exact are long options that are whole names, not abbreviations of
	// a dangerous one (tar --checkpoint against --checkpoint-action).
	exact []string
	// short are dangerous short options, alone or in a cluster (-xvf).
	short map[byte]argHit
	// shortArg are short options that take the rest of a cluster as
	// their value (-fIMAGE): the scan of a cluster stops there.
	shortArg string
	// words hit as whole words (find -exec, openssl -engine).
	words map[string]argHit
	// prefixes hit words that start with them (cc -B/dir, -fplugin=).
	prefixes []wordPrefix
	// plus hits a word starting with "+" (less +cmd).
	plus *argHit
}

type longOpt struct {
	name string
	hit  argHit
}

type wordPrefix struct {
	prefix string
	hit    argHit
}

func (t *optTable) rules() []string {
	var out []string
	add := func(h argHit) {
		if !slices.Contains(out, h.rule) {
			out = append(out, h.rule)
		}
	}
	for _, l := range t.long {
		add(l.hit)
	}
	for _, b := range sortedKeys(t.short) {
		add(t.short[b])
	}
	for _, w := range sortedKeys(t.words) {
		add(t.words[w])
	}
	for _, p := range t.prefixes {
		add(p.hit)
	}
	if t.plus != nil {
		add(*t.plus)
	}
	return out
}

func sortedKeys[K byte | string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// scan returns the hits of every word of args.
func (t *optTable) scan(args []string) []argHit {
	var hits []argHit
	for _, a := range args {
		hits = append(hits, t.word(a)...)
	}
	return hits
}

func (t *optTable) word(a string) []argHit {
	var hits []argHit
	if h, ok := t.words[a]; ok {
		hits = append(hits, h)
	}
	for _, p := range t.prefixes {
		if strings.HasPrefix(a, p.prefix) {
			hits = append(hits, p.hit)
		}
	}
	switch {
	case t.plus != nil && strings.HasPrefix(a, "+"):
		hits = append(hits, *t.plus)
	case strings.HasPrefix(a, "--"):
		if h, ok := t.longHit(a); ok {
			hits = append(hits, h)
		}
	case len(a) > 1 && a[0] == '-':
		if h, ok := t.clusterHit(a[1:]); ok {
			hits = append(hits, h)
		}
	}
	return hits
}

// longHit matches "--name[=value]" against the dangerous long options.
func (t *optTable) longHit(a string) (argHit, bool) {
	name, _, _ := strings.Cut(a[2:], "=")
	if name == "" || slices.Contains(t.exact, name) {
		return argHit{}, false
	}
	for _, l := range t.long {
		if strings.HasPrefix(l.name, name) {
			return l.hit, true
		}
	}
	return argHit{}, false
}

// clusterHit scans a cluster of short options (without its "-").
func (t *optTable) clusterHit(cluster string) (argHit, bool) {
	for i := 0; i < len(cluster); i++ {
		c := cluster[i]
		if h, ok := t.short[c]; ok {
			return h, true
		}
		if strings.IndexByte(t.shortArg, c) >= 0 {
			break
		}
	}
	return argHit{}, false
}

func optSpec(t *optTable) *argSpec {
	return &argSpec{rules: t.rules(), check: t.scan}
}

// subcommands passes only argvs whose first word is a subcommand known
// not to run package code; safe maps it to nil (any further words) or to
// a check of the words after it. Options before the subcommand are a
// miss, so an option's value is never taken for the subcommand.
func subcommands(rule, why string, safe map[string]func(rest []string) bool) *argSpec {
	return &argSpec{rules: []string{rule}, check: func(args []string) []argHit {
		if len(args) > 0 {
			if rest, known := safe[args[0]]; known && (rest == nil || rest(args[1:])) {
				return nil
			}
		}
		return []argHit{{rule, why}}
	}}
}

// first reports whether rest starts with one of words.
func first(words ...string) func([]string) bool {
	return func(rest []string) bool { return len(rest) > 0 && slices.Contains(words, rest[0]) }
}

// none reports whether rest holds none of words.
func none(words ...string) func([]string) bool {
	return func(rest []string) bool {
		return !slices.ContainsFunc(rest, func(w string) bool { return slices.Contains(words, w) })
	}
}

// noOperands reports whether rest has only options.
func noOperands(rest []string) bool {
	return !slices.ContainsFunc(rest, func(w string) bool { return !strings.HasPrefix(w, "-") })
}

func safeSet(names ...string) map[string]func([]string) bool {
	m := make(map[string]func([]string) bool, len(names))
	for _, n := range names {
		m[n] = nil
	}
	return m
}

func with(m map[string]func([]string) bool, extra map[string]func([]string) bool) map[string]func([]string) bool {
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// ---- the table ----

var compilers = map[string]bool{"cc": true, "c++": true, "gcc": true, "g++": true, "clang": true, "clang++": true}

func init() {
	register(&argSpec{rules: gitRules, check: gitCheck}, "git")
	register(tarSpec(), "tar", "gtar", "bsdtar")
	register(&argSpec{rules: sedRules, check: sedCheck}, "sed", "gsed")
	register(sshSpec("ssh", "bcDeEiJlLmoOpPQRSwWBFI", map[byte]string{'F': "ssh -F", 'I': "ssh -I"}), "ssh", "slogin")
	register(sshSpec("scp", "cDFiJloPSX", map[byte]string{'S': "scp -S", 'D': "scp -S", 'F': "scp -F"}), "scp")

	const editor = "an editor runs commands from its arguments (-c, +cmd, -S), its startup files and, without a terminal, from stdin"
	register(whole("vim", editor, "--version", "--help", "-h"),
		"vim", "vi", "ex", "view", "rvim", "rview", "vimdiff", "gvim", "gview", "gvimdiff", "evim", "eview", "vimx", "nvim")
	register(whole("emacs", editor, "--version", "--help"), "emacs", "emacs-nox", "emacsclient")
	register(whole("ed", "ed runs ! commands read from stdin"), "ed")
	register(whole("dc", "dc runs ! commands read from stdin", "--version", "--help"), "dc")
	register(whole("sftp", "sftp runs ! commands read from stdin or a batch file, and -S/-D name programs"), "sftp")
	register(whole("ftp", "ftp runs ! commands read from stdin"), "ftp")

	const build = "a build tool runs whatever its build files say"
	register(whole("make", build, "--version", "-v", "--help", "-h"), "make", "gmake", "bmake", "pmake")
	register(whole("ninja", build, "--version", "--help", "-h"), "ninja")
	register(whole("cmake", build, "--version", "--help", "-h"), "cmake")
	const runner = "it downloads or runs a package's programs"
	register(whole("npx", runner, "--version", "--help", "-h"), "npx", "pnpx", "bunx", "uvx", "pipx")
	const scripts = "this subcommand may run package scripts or build code; only read-only subcommands pass"
	register(subcommands("npm scripts", scripts, with(safeSet(
		"ls", "list", "ll", "la", "view", "info", "show", "v", "search", "s", "se", "find", "outdated",
		"explain", "why", "fund", "query", "prefix", "root", "help", "whoami", "ping", "--version", "-v", "--help", "-h"),
		map[string]func([]string) bool{
			"config": first("get", "list", "ls"), "pkg": first("get"), "audit": none("fix"), "version": noOperands,
		})), "npm")
	register(subcommands("yarn scripts", scripts, with(safeSet(
		"info", "list", "why", "outdated", "licenses", "audit", "help", "versions", "--version", "-v", "--help", "-h"),
		map[string]func([]string) bool{
			"config": first("get", "list"), "cache": first("dir", "list"), "workspaces": first("info", "list"),
		})), "yarn", "yarnpkg")
	register(subcommands("pnpm scripts", scripts, with(safeSet(
		"list", "ls", "ll", "la", "why", "outdated", "view", "info", "show", "licenses", "root", "bin", "help",
		"--version", "-v", "--help", "-h"),
		map[string]func([]string) bool{
			"config": first("get", "list"), "store": first("path", "status"), "audit": none("--fix"),
		})), "pnpm")
	register(subcommands("pip install", scripts, with(safeSet(
		"list", "show", "freeze", "check", "help", "search", "debug", "inspect", "hash", "--version", "-V", "--help", "-h"),
		map[string]func([]string) bool{
			"config": first("list", "get", "debug"), "cache": first("dir", "info", "list"), "index": first("versions"),
		})), "pip")
	register(subcommands("cargo build", "cargo runs build scripts and package code; only read-only subcommands pass", safeSet(
		"version", "--version", "-V", "help", "--help", "-h", "--list", "metadata", "tree", "search",
		"locate-project", "pkgid", "verify-project", "fetch")), "cargo")
	register(subcommands("go build", "go runs build steps, tests and generators; only read-only subcommands pass", with(safeSet(
		"version", "help", "doc", "fmt"),
		map[string]func([]string) bool{
			"env": func(rest []string) bool { return !slices.ContainsFunc(rest, goEnvWrites) },
			"mod": first("graph", "why", "verify", "edit"),
		})), "go")

	register(optSpec(&optTable{
		plus: &argHit{"less +cmd", "+cmd runs a less command at start (! runs a program, | pipes to one)"},
		long: []longOpt{
			{"log-file", argHit{"less --log-file", "--log-file writes a file"}},
			{"LOG-FILE", argHit{"less --log-file", "--LOG-FILE writes a file"}},
			{"lesskey-file", argHit{"less --lesskey", "--lesskey-file loads key bindings that can run programs"}},
			{"lesskey-src", argHit{"less --lesskey", "--lesskey-src loads key bindings that can run programs"}},
			{"lesskey-content", argHit{"less --lesskey", "--lesskey-content sets key bindings that can run programs"}},
		},
		short: map[byte]argHit{
			'o': {"less --log-file", "-o writes a file"},
			'O': {"less --log-file", "-O writes a file"},
			'k': {"less --lesskey", "-k loads key bindings that can run programs"},
		},
		shortArg: "bhjpPtTxyz#D",
	}), "less")
	register(optSpec(&optTable{
		long: []longOpt{
			{"pager", argHit{"man --pager", "--pager names the program that shows the page"}},
			{"html", argHit{"man --html", "--html runs a browser"}},
			{"config-file", argHit{"man --config-file", "--config-file reads a configuration that names programs"}},
			{"gxditview", argHit{"man --gxditview", "--gxditview runs a viewer"}},
		},
		short: map[byte]argHit{
			'P': {"man --pager", "-P names the program that shows the page"},
			'H': {"man --html", "-H runs a browser"},
			'C': {"man --config-file", "-C reads a configuration that names programs"},
			'X': {"man --gxditview", "-X runs a viewer"},
		},
		shortArg: "ELmMprRSsT",
	}), "man")
	register(optSpec(&optTable{words: map[string]argHit{
		"-exec":    {"find -exec", "-exec runs a program"},
		"-execdir": {"find -exec", "-execdir runs a program"},
		"-ok":      {"find -exec", "-ok runs a program"},
		"-okdir":   {"find -exec", "-okdir runs a program"},
		"-delete":  {"find -delete", "-delete removes files"},
		"-fprint":  {"find -fprint", "-fprint writes a file"},
		"-fprint0": {"find -fprint", "-fprint0 writes a file"},
		"-fprintf": {"find -fprint", "-fprintf writes a file"},
		"-fls":     {"find -fprint", "-fls writes a file"},
	}}), "find", "gfind")
	register(optSpec(&optTable{
		long: []longOpt{
			{"rsh", argHit{"rsync --rsh", "--rsh names the remote shell program"}},
			{"rsync-path", argHit{"rsync --rsync-path", "--rsync-path names the program run on the other side"}},
			{"remote-option", argHit{"rsync --remote-option", "--remote-option passes options to the other side"}},
			{"daemon", argHit{"rsync --daemon", "--daemon runs a server"}},
		},
		short: map[byte]argHit{
			'e': {"rsync --rsh", "-e names the remote shell program"},
			'M': {"rsync --remote-option", "-M passes options to the other side"},
		},
		shortArg: "fTB@",
	}), "rsync")
	register(optSpec(&optTable{
		long: []longOpt{
			{"test", argHit{"zip -T", "--test runs unzip, or the program -TT names"}},
			{"unzip-command", argHit{"zip -T", "--unzip-command names a program to run"}},
		},
		short: map[byte]argHit{'T': {"zip -T", "-T/-TT runs unzip or a named program"}},
	}), "zip")
	register(optSpec(&optTable{long: []longOpt{
		{"compress-program", argHit{"sort --compress-program", "--compress-program names a program to run"}},
	}}), "sort")
	register(optSpec(&optTable{long: []longOpt{
		{"filter", argHit{"split --filter", "--filter runs a shell command"}},
	}}), "split")
	register(optSpec(&optTable{
		long: []longOpt{
			{"use-askpass", argHit{"wget --use-askpass", "--use-askpass names a program to run"}},
			{"execute", argHit{"wget --execute", "--execute runs wgetrc commands (use_askpass names a program)"}},
			{"config", argHit{"wget --execute", "--config reads wgetrc commands (use_askpass names a program)"}},
		},
		short:    map[byte]argHit{'e': {"wget --execute", "-e runs wgetrc commands (use_askpass names a program)"}},
		shortArg: "oaOiBtTwPUQlARDIX",
	}), "wget")
	register(&argSpec{rules: []string{"openssl -engine"}, check: func(args []string) []argHit {
		for _, a := range args {
			name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
			name, _, _ = strings.Cut(name, "=")
			if a != name && (strings.HasSuffix(name, "engine") || strings.HasPrefix(name, "provider")) {
				return []argHit{{"openssl -engine", a + " loads a library"}}
			}
		}
		return nil
	}}, "openssl")
	register(optSpec(&optTable{short: map[byte]argHit{'U': {"groff -U", "-U lets the document run commands"}}}),
		"groff", "troff", "nroff")
	cc := optSpec(&optTable{prefixes: []wordPrefix{
		{"-wrapper", argHit{"cc -wrapper", "-wrapper runs every subprogram through a named program"}},
		{"-B", argHit{"cc -B", "-B picks the compiler's subprograms from a directory"}},
		{"-fplugin", argHit{"cc -fplugin", "-fplugin loads a library"}},
		{"-specs", argHit{"cc -specs", "-specs reads a file that names programs"}},
		{"--specs", argHit{"cc -specs", "--specs reads a file that names programs"}},
		{"@", argHit{"cc @file", "@file reads more options from a file"}},
		{"-fuse-ld", argHit{"cc -fuse-ld", "-fuse-ld picks the linker program"}},
		{"--ld-path", argHit{"cc -fuse-ld", "--ld-path picks the linker program"}},
		{"-Wl,", argHit{"cc -Wl", "options passed to the linker or assembler can load plugins"}},
		{"-Wa,", argHit{"cc -Wl", "options passed to the linker or assembler can load plugins"}},
		{"-Wp,", argHit{"cc -Wl", "options passed to the preprocessor can load plugins"}},
		{"-Xlinker", argHit{"cc -Wl", "options passed to the linker can load plugins"}},
		{"-Xassembler", argHit{"cc -Wl", "options passed to the assembler can load plugins"}},
		{"-Xpreprocessor", argHit{"cc -Wl", "options passed to the preprocessor can load plugins"}},
		{"-Xclang", argHit{"cc -Wl", "options passed to the compiler proper can load plugins"}},
	}})
	for c := range compilers {
		register(cc, c)
	}
}

// goEnvWrites matches go env's -w and -u (the flag package also takes
// --w and -w=…).
func goEnvWrites(w string) bool {
	name, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(w, "-"), "-"), "=")
	return w != name && (name == "w" || name == "u")
}

// ---- tar ----

var tarTable = optTable{
	long: []longOpt{
		{"to-command", argHit{"tar --to-command", "--to-command runs a program for every member"}},
		{"use-compress-program", argHit{"tar --use-compress-program", "--use-compress-program names a program to run"}},
		{"checkpoint-action", argHit{"tar --checkpoint-action", "--checkpoint-action can run a program"}},
		{"info-script", argHit{"tar --info-script", "--info-script names a program to run"}},
		{"new-volume-script", argHit{"tar --info-script", "--new-volume-script names a program to run"}},
		{"rsh-command", argHit{"tar --rsh-command", "--rsh-command names the remote shell program"}},
		{"rmt-command", argHit{"tar --rsh-command", "--rmt-command names the remote tape program"}},
	},
	exact: []string{"checkpoint"},
	short: map[byte]argHit{
		'I': {"tar --use-compress-program", "-I names a program to run"},
		'F': {"tar --info-script", "-F names a program to run"},
	},
	shortArg: "fCTXbgHKLNV",
}

// tarArg are tar's short options that take a value.
const tarArg = "fCTXbgHKLNVIF"

func tarSpec() *argSpec {
	rules := append(tarTable.rules(), "tar remote archive")
	return &argSpec{rules: rules, check: func(args []string) []argHit {
		hits := tarTable.scan(args)
		var archives []string // the values of -f/--file
		if len(args) > 0 && args[0] != "" && !strings.HasPrefix(args[0], "-") {
			// Old style (tar xvf a.tar): the first word is a cluster whose
			// value-taking letters take the following words in order.
			next := 1
			for i := 0; i < len(args[0]); i++ {
				c := args[0][i]
				if h, ok := tarTable.short[c]; ok {
					hits = append(hits, h)
				}
				if strings.IndexByte(tarArg, c) >= 0 {
					if c == 'f' && next < len(args) {
						archives = append(archives, args[next])
					}
					next++
				}
			}
		}
		forceLocal := false
		for i, a := range args {
			switch {
			case strings.HasPrefix(a, "--"):
				name, value, eq := strings.Cut(a[2:], "=")
				switch {
				case name == "force-local":
					forceLocal = true
				case name != "" && strings.HasPrefix("file", name):
					if eq {
						archives = append(archives, value)
					} else if i+1 < len(args) {
						archives = append(archives, args[i+1])
					}
				}
			case len(a) > 1 && a[0] == '-':
				for j := 1; j < len(a); j++ {
					if strings.IndexByte(tarArg, a[j]) < 0 {
						continue
					}
					if a[j] == 'f' {
						if j+1 < len(a) {
							archives = append(archives, a[j+1:])
						} else if i+1 < len(args) {
							archives = append(archives, args[i+1])
						}
					}
					break
				}
			}
		}
		if !forceLocal {
			for _, ar := range archives {
				// tar reads host:file from another host through rsh.
				if host, _, ok := strings.Cut(ar, ":"); ok && !strings.Contains(host, "/") {
					hits = append(hits, argHit{"tar remote archive", fmt.Sprintf("archive %q is on another host (tar runs rsh for it)", clip(ar))})
					break
				}
			}
		}
		return hits
	}}
}

// ---- ssh and scp ----

// sshSafeOptions are the -o keywords (lower case) that name no program,
// library, socket or configuration file. Any other -o is a miss.
var sshSafeOptions = map[string]bool{
	"batchmode": true, "connecttimeout": true, "connectionattempts": true, "stricthostkeychecking": true,
	"userknownhostsfile": true, "globalknownhostsfile": true, "serveraliveinterval": true,
	"serveralivecountmax": true, "tcpkeepalive": true, "port": true, "user": true, "loglevel": true,
	"compression": true, "identitiesonly": true, "identityfile": true, "passwordauthentication": true,
	"pubkeyauthentication": true, "kbdinteractiveauthentication": true, "preferredauthentications": true,
	"addressfamily": true, "requesttty": true, "hostkeyalgorithms": true, "pubkeyacceptedalgorithms": true,
	"pubkeyacceptedkeytypes": true, "ciphers": true, "macs": true, "kexalgorithms": true,
	"checkhostip": true, "hashknownhosts": true, "numberofpasswordprompts": true, "exitonforwardfailure": true,
	"updatehostkeys": true, "visualhostkey": true, "sendenv": true, "setenv": true, "escapechar": true,
	"rekeylimit": true, "ipqos": true, "fingerprinthash": true, "verifyhostkeydns": true,
}

// sshSpec builds the rule of ssh or scp: shortArg are the options that
// take a value, dangerous the ones that name a program, library or
// configuration file; -o passes only with a keyword of sshSafeOptions.
func sshSpec(name, shortArg string, dangerous map[byte]string) *argSpec {
	optRule := name + " -o"
	rules := []string{optRule}
	for _, b := range sortedKeys(dangerous) {
		if !slices.Contains(rules, dangerous[b]) {
			rules = append(rules, dangerous[b])
		}
	}
	return &argSpec{rules: rules, check: func(args []string) []argHit {
		var hits []argHit
		for i := 0; i < len(args); i++ {
			a := args[i]
			if len(a) < 2 || a[0] != '-' || a == "--" {
				continue
			}
			for j := 1; j < len(a); j++ {
				c := a[j]
				if r, ok := dangerous[c]; ok {
					hits = append(hits, argHit{r, fmt.Sprintf("-%c names a program, library or configuration file", c)})
					break
				}
				if strings.IndexByte(shortArg, c) < 0 && c != 'o' {
					continue
				}
				value := a[j+1:]
				if value == "" && i+1 < len(args) {
					i++
					value = args[i]
				}
				if c == 'o' && !sshSafeOptions[sshKeyword(value)] {
					hits = append(hits, argHit{optRule, fmt.Sprintf("-o %s may name a program, library or configuration file", clip(value))})
				}
				break
			}
		}
		return hits
	}}
}

// sshKeyword is the lower-cased keyword of an -o value ("Key=value" or
// "Key value").
func sshKeyword(v string) string {
	v = strings.TrimLeft(v, " \t")
	if i := strings.IndexAny(v, "= \t"); i >= 0 {
		v = v[:i]
	}
	return strings.ToLower(v)
}

// ---- git ----

var gitRules = []string{
	"git -c", "git --config-env", "git --exec-path", "git option", "git alias", "git --exec",
	"git --upload-pack", "git --receive-pack", "git --template", "git clone --config", "git grep -O",
	"git config", "git bisect run", "git submodule foreach", "git difftool", "git mergetool",
	"git filter-branch", "git daemon", "git instaweb", "git send-email", "git web--browse", "git hook",
	"git for-each-repo", "git maintenance",
}

// gitGlobalArg are git's options before the subcommand that take the next
// word as their value; gitGlobalEq take it only after "=".
var (
	gitGlobalArg = []string{"-C", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--shallow-file", "--attr-source"}
	gitGlobalEq  = []string{"--git-dir", "--work-tree", "--namespace", "--super-prefix", "--attr-source", "--list-cmds"}
	gitGlobal    = []string{
		"-p", "--paginate", "-P", "--no-pager", "--no-replace-objects", "--no-lazy-fetch", "--no-optional-locks",
		"--no-advice", "--bare", "--literal-pathspecs", "--no-literal-pathspecs", "--glob-pathspecs",
		"--noglob-pathspecs", "--icase-pathspecs", "--html-path", "--man-path", "--info-path", "--exec-path",
		"--list-builtins", "--list-parseopt-builtins",
	}
)

// gitWhole are subcommands that exist to run other programs.
var gitWhole = map[string]string{
	"difftool":      "difftool runs a diff program (-x names any)",
	"mergetool":     "mergetool runs a merge program",
	"filter-branch": "filter-branch runs shell commands",
	"daemon":        "daemon runs a server (and --access-hook)",
	"instaweb":      "instaweb runs a web server and a browser",
	"send-email":    "send-email runs mail programs named in its options",
	"web--browse":   "web--browse runs a browser",
	"hook":          "hook runs the repository's hooks",
	"for-each-repo": "for-each-repo runs git with any arguments",
	"maintenance":   "maintenance schedules and runs jobs",
}

// gitKnown are the subcommands known to run no program named in their
// arguments beyond what the checks below look at. Any other word may be
// an alias (which configuration can point at a shell command) or an
// external git-<name> program.
var gitKnown = map[string]bool{}

func init() {
	for _, c := range strings.Fields(`add am annotate apply archive backfill bisect blame branch bugreport
		bundle cat-file check-attr check-ignore check-mailmap check-ref-format checkout checkout-index cherry
		cherry-pick clean clone column commit commit-graph commit-tree config count-objects describe diagnose
		diff diff-files diff-index diff-tree fast-export fast-import fetch fetch-pack fmt-merge-msg
		for-each-ref format-patch fsck gc get-tar-commit-id grep hash-object help index-pack init init-db
		interpret-trailers log ls-files ls-remote ls-tree mailinfo mailsplit merge merge-base merge-file
		merge-index merge-tree mktag mktree multi-pack-index mv name-rev notes pack-objects pack-refs
		patch-id prune prune-packed pull push range-diff read-tree rebase reflog refs remote repack replace
		replay rerere reset restore rev-list rev-parse revert rm send-pack shortlog show show-branch
		show-index show-ref sparse-checkout stage stash status stripspace submodule switch symbolic-ref tag
		unpack-file unpack-objects update-index update-ref update-server-info var verify-commit verify-pack
		verify-tag version whatchanged worktree write-tree`) {
		gitKnown[c] = true
	}
}

// gitEverywhere are options of several subcommands that name the program
// run on the other side of a transport (fetch, clone, ls-remote, push,
// archive, send-pack, rebase --exec).
var gitEverywhere = optTable{long: []longOpt{
	{"upload-pack", argHit{"git --upload-pack", "--upload-pack names a program to run"}},
	{"receive-pack", argHit{"git --receive-pack", "--receive-pack names a program to run"}},
	{"exec", argHit{"git --exec", "--exec names a program to run"}},
}}

var gitSubTables = map[string]*optTable{
	"rebase": {short: map[byte]argHit{'x': {"git --exec", "-x runs a shell command after each commit"}}, shortArg: "sXCS"},
	"grep": {
		long:     []longOpt{{"open-files-in-pager", argHit{"git grep -O", "--open-files-in-pager names a program to run"}}},
		short:    map[byte]argHit{'O': {"git grep -O", "-O names a program to run"}},
		shortArg: "efABCm",
	},
	"clone": {
		long: []longOpt{
			{"config", argHit{"git clone --config", "--config sets configuration, which can name programs to run"}},
			{"template", argHit{"git --template", "--template installs hooks"}},
		},
		short: map[byte]argHit{
			'c': {"git clone --config", "-c sets configuration, which can name programs to run"},
			'u': {"git --upload-pack", "-u names a program to run"},
		},
		shortArg: "objs",
	},
	"init":    {long: []longOpt{{"template", argHit{"git --template", "--template installs hooks"}}}},
	"init-db": {long: []longOpt{{"template", argHit{"git --template", "--template installs hooks"}}}},
}

func gitCheck(args []string) []argHit {
	var hits []argHit
	i := 0
	sub := ""
options:
	for ; i < len(args); i++ {
		a := args[i]
		name, _, eq := strings.Cut(a, "=")
		switch {
		case !strings.HasPrefix(a, "-"):
			break options
		case a == "--help" || a == "-h":
			sub = "help"
			break options
		case a == "--version" || a == "-v":
			sub = "version"
			break options
		case strings.HasPrefix(a, "-c"):
			hits = append(hits, argHit{"git -c", "-c sets configuration, which can name programs to run (core.pager, core.sshCommand, aliases, …)"})
			if a == "-c" {
				i++
			}
		case name == "--config-env":
			hits = append(hits, argHit{"git --config-env", "--config-env sets configuration, which can name programs to run"})
			if !eq {
				i++
			}
		case name == "--exec-path" && eq:
			hits = append(hits, argHit{"git --exec-path", "--exec-path picks the directory git runs its programs from"})
		case !eq && slices.Contains(gitGlobalArg, a):
			i++
		case eq && slices.Contains(gitGlobalEq, name), !eq && slices.Contains(gitGlobal, a):
		default:
			hits = append(hits, argHit{"git option", fmt.Sprintf("option %q is not known, so the subcommand is not known", clip(a))})
			return hits
		}
	}
	var rest []string
	if sub == "" {
		if i >= len(args) {
			return hits // git alone prints its usage
		}
		sub, rest = args[i], args[i+1:]
	} else if i+1 < len(args) {
		rest = args[i+1:]
	}
	switch {
	case gitWhole[sub] != "":
		return append(hits, argHit{"git " + sub, gitWhole[sub]})
	case !gitKnown[sub]:
		return append(hits, argHit{"git alias", fmt.Sprintf("%q is not a git command known to run no other program (it may be an alias or a git-%s program)", clip(sub), clip(sub))})
	}
	hits = append(hits, gitEverywhere.scan(rest)...)
	if t := gitSubTables[sub]; t != nil {
		hits = append(hits, t.scan(rest)...)
	}
	switch sub {
	case "bisect":
		if slices.Contains(rest, "run") {
			hits = append(hits, argHit{"git bisect run", "bisect run runs a program"})
		}
	case "submodule":
		if slices.Contains(rest, "foreach") {
			hits = append(hits, argHit{"git submodule foreach", "submodule foreach runs a shell command"})
		}
	case "config":
		if gitConfigWrites(rest) {
			hits = append(hits, argHit{"git config", "git config here may write configuration, which can name programs to run; only reads pass"})
		}
	}
	return hits
}

// gitConfigReadOpts are the git config options of a read; gitConfigArg
// take the next word as their value.
var (
	gitConfigReadOpts = []string{
		"--get", "--get-all", "--get-regexp", "--get-urlmatch", "--get-color", "--get-colorbool", "-l", "--list",
		"--name-only", "--show-origin", "--show-scope", "-z", "--null", "--global", "--system", "--local",
		"--worktree", "--includes", "--no-includes", "--bool", "--int", "--bool-or-int", "--path",
		"--expiry-date", "--fixed-value", "-f", "--file", "--blob", "--type", "--default",
	}
	gitConfigArg = []string{"-f", "--file", "--blob", "--type", "--default"}
)

// gitConfigWrites reports whether git config's arguments may write (or
// edit) configuration: an unknown option, a subcommand other than get or
// list, or a name with a value without --get or --list.
func gitConfigWrites(rest []string) bool {
	var operands []string
	read := false
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			operands = append(operands, a)
			continue
		}
		name, _, eq := strings.Cut(a, "=")
		if !slices.Contains(gitConfigReadOpts, name) {
			if len(operands) > 0 && (operands[0] == "get" || operands[0] == "list") {
				continue // the options of git config get/list only read
			}
			return true
		}
		if strings.HasPrefix(name, "--get") || name == "-l" || name == "--list" {
			read = true
		}
		if !eq && slices.Contains(gitConfigArg, name) {
			i++
		}
	}
	switch {
	case len(operands) > 0 && (operands[0] == "get" || operands[0] == "list"):
		return false
	case read:
		return false
	}
	return len(operands) > 1
}
