package shell

import (
	"fmt"
	"strings"
)

// binProfile describes the arguments a safe bin accepts while staying
// stdin-only. Anything not described (an unknown flag, one operand too
// many) makes the command a miss: unknown means unsafe.
type binProfile struct {
	// flags maps "-x" and "--long" to the number of values they take; a
	// value of -1 means an optional value given only as --long=value.
	flags map[string]int
	// operands is the number of non-file operands (a pattern, a filter, the
	// sets of tr). Any further operand would be a file.
	operands int
	// operandFlags take the place of the first operand (grep -e).
	operandFlags []string
	// numeric accepts -N (head -5).
	numeric bool
}

func flagSet(arity int, names ...string) map[string]int {
	m := make(map[string]int, len(names))
	for _, n := range names {
		m[n] = arity
	}
	return m
}

func merge(ms ...map[string]int) map[string]int {
	out := map[string]int{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// safeProfiles are the built-in profiles. A configured safe bin without a
// profile may only run without arguments. Flags that write (sort -o),
// recurse (grep -r), read files (grep -f, sort --files0-from, jq --rawfile)
// or run programs (sort --compress-program) are absent, so they miss.
var safeProfiles = map[string]binProfile{
	"grep": {
		flags: merge(
			flagSet(0, "-i", "-y", "-v", "-c", "-n", "-h", "-H", "-o", "-q", "-s", "-w", "-x", "-E", "-F",
				"-G", "-P", "-z", "-a", "-b", "-U", "--ignore-case", "--no-ignore-case", "--invert-match",
				"--count", "--line-number", "--no-filename", "--with-filename", "--only-matching",
				"--quiet", "--silent", "--word-regexp", "--line-regexp", "--extended-regexp",
				"--fixed-strings", "--basic-regexp", "--perl-regexp", "--null-data", "--text",
				"--no-messages", "--byte-offset", "--binary"),
			flagSet(1, "-e", "--regexp", "-m", "--max-count", "-A", "-B", "-C", "--after-context",
				"--before-context", "--context", "--label"),
			flagSet(-1, "--color", "--colour"),
		),
		operands:     1,
		operandFlags: []string{"-e", "--regexp"},
	},
	"sort": {
		flags: merge(
			flagSet(0, "-b", "-d", "-f", "-g", "-h", "-i", "-M", "-n", "-R", "-r", "-V", "-s", "-u", "-z", "-c", "-C",
				"--ignore-leading-blanks", "--dictionary-order", "--ignore-case", "--general-numeric-sort",
				"--human-numeric-sort", "--ignore-nonprinting", "--month-sort", "--numeric-sort",
				"--random-sort", "--reverse", "--version-sort", "--stable", "--unique", "--zero-terminated"),
			flagSet(1, "-k", "--key", "-t", "--field-separator", "-S", "--buffer-size"),
		),
	},
	"head": {
		flags: merge(flagSet(0, "-q", "-v", "-z", "--quiet", "--silent", "--verbose", "--zero-terminated"),
			flagSet(1, "-n", "-c", "--lines", "--bytes")),
		numeric: true,
	},
	"tail": {
		flags: merge(flagSet(0, "-q", "-v", "-z", "--quiet", "--silent", "--verbose", "--zero-terminated"),
			flagSet(1, "-n", "-c", "--lines", "--bytes")),
		numeric: true,
	},
	"wc": {
		flags: flagSet(0, "-c", "-l", "-w", "-m", "-L", "--bytes", "--lines", "--words", "--chars", "--max-line-length"),
	},
	"cut": {
		flags: merge(flagSet(0, "-s", "-z", "-n", "--complement", "--only-delimited", "--zero-terminated"),
			flagSet(1, "-b", "-c", "-d", "-f", "--bytes", "--characters", "--delimiter", "--fields", "--output-delimiter")),
	},
	"tr": {
		flags:    flagSet(0, "-c", "-C", "-d", "-s", "-t", "--complement", "--delete", "--squeeze-repeats", "--truncate-set1"),
		operands: 2,
	},
	"uniq": {
		flags: merge(flagSet(0, "-c", "-d", "-D", "-i", "-u", "-z", "--count", "--repeated", "--ignore-case", "--unique", "--zero-terminated"),
			flagSet(1, "-f", "-s", "-w", "--skip-fields", "--skip-chars", "--check-chars")),
	},
	"jq": {
		flags: merge(
			flagSet(0, "-r", "-j", "-c", "-n", "-e", "-s", "-S", "-a", "-C", "-M", "-R", "--raw-output",
				"--join-output", "--compact-output", "--null-input", "--exit-status", "--slurp",
				"--sort-keys", "--ascii-output", "--color-output", "--monochrome-output", "--raw-input", "--tab"),
			flagSet(1, "--indent"),
			flagSet(2, "--arg", "--argjson"),
		),
		operands: 1,
	},
	"cat":       {flags: flagSet(0, "-A", "-b", "-e", "-E", "-n", "-s", "-t", "-T", "-u", "-v")},
	"tac":       {flags: merge(flagSet(0, "-b", "-r"), flagSet(1, "-s"))},
	"rev":       {},
	"base64":    {flags: merge(flagSet(0, "-d", "-i", "--decode", "--ignore-garbage"), flagSet(1, "-w", "--wrap"))},
	"sha256sum": {flags: flagSet(0, "-b", "-t", "-z", "--binary", "--text", "--tag", "--zero")},
	"sha1sum":   {flags: flagSet(0, "-b", "-t", "-z", "--binary", "--text", "--tag", "--zero")},
	"md5sum":    {flags: flagSet(0, "-b", "-t", "-z", "--binary", "--text", "--tag", "--zero")},
}

// checkSafeArgs returns why args would make the safe bin named base leave
// stdin-only use, or "". A bare "-" operand is refused like any file
// operand: it is not always stdin (GNU tee writes a file named "-"), and a
// safe bin reads stdin without one.
func checkSafeArgs(base string, args []string) string {
	prof, ok := safeProfiles[base]
	if !ok {
		switch {
		case len(args) == 0:
			return ""
		case args[0] == "-":
			return dashOperand
		}
		return fmt.Sprintf("no argument profile, so no arguments are accepted (got %q)", clip(args[0]))
	}
	operands := 0
	maxOperands := prof.operands
	options := true
	for i := 0; i < len(args); i++ {
		arg := args[i]
		switch {
		case arg == "-":
			return dashOperand
		case !options || !strings.HasPrefix(arg, "-"):
			operands++
			if operands > prof.operands {
				return fmt.Sprintf("operand %q would be read as a file", clip(arg))
			}
		case arg == "--":
			options = false
		case strings.HasPrefix(arg, "--"):
			name, _, hasValue := strings.Cut(arg, "=")
			n, known := prof.flags[name]
			switch {
			case !known:
				return fmt.Sprintf("flag %q is not known to be stdin-only", clip(name))
			case n == -1:
			case hasValue && n != 1:
				return fmt.Sprintf("flag %q takes no inline value", clip(name))
			case hasValue:
			default:
				if i+n > len(args)-1 {
					return fmt.Sprintf("flag %q is missing its value", clip(name))
				}
				i += n
			}
			if containsStr(prof.operandFlags, name) && maxOperands > 0 {
				maxOperands = prof.operands - 1
			}
		default:
			if prof.numeric && allDigits(arg[1:]) {
				continue
			}
			// A cluster of short flags: -abc, or -n5 with a value.
			for j := 1; j < len(arg); j++ {
				name := "-" + string(arg[j])
				n, known := prof.flags[name]
				if !known || n < 0 {
					return fmt.Sprintf("flag %q is not known to be stdin-only", name)
				}
				if containsStr(prof.operandFlags, name) && maxOperands > 0 {
					maxOperands = prof.operands - 1
				}
				if n == 0 {
					continue
				}
				rest := arg[j+1:]
				need := n
				if rest != "" {
					need--
				}
				if i+need > len(args)-1 {
					return fmt.Sprintf("flag %q is missing its value", name)
				}
				i += need
				break
			}
		}
	}
	if operands > maxOperands {
		return "an operand would be read as a file (the pattern is given by a flag)"
	}
	return ""
}

const dashOperand = `operand "-" is refused: it names a file for some programs, and stdin needs no operand`

func containsStr(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
