package shell

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// An allowlist entry is either a bare absolute path, which allows the
// binary with any arguments, or a command line of fixed words, which
// allows exactly that argv: "/usr/bin/git status", "'/usr/bin/date'".
// An entry with whitespace, a quote or a backslash is a command line.
// "approve --always" writes command lines (see AlwaysEntries).

// allowEntry is a parsed allowlist entry.
type allowEntry struct {
	path string
	args []string // exact arguments; nil for a bare path
	any  bool     // a bare path: any arguments
}

// parseAllowEntry parses one allowlist entry.
func parseAllowEntry(e string) (allowEntry, error) {
	if cleanAbs(e) && !strings.ContainsAny(e, " \t\n\r\v\f'\"\\") {
		return allowEntry{path: e, any: true}, nil
	}
	if strings.IndexByte(e, 0) >= 0 {
		return allowEntry{}, errors.New("contains a NUL byte")
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(e), "")
	if err != nil {
		return allowEntry{}, fmt.Errorf("does not parse: %w", err)
	}
	if len(f.Stmts) != 1 {
		return allowEntry{}, errors.New("want one command")
	}
	st := f.Stmts[0]
	call, ok := st.Cmd.(*syntax.CallExpr)
	if !ok || st.Negated || st.Background || st.Coprocess || st.Disown || len(st.Redirs) > 0 ||
		len(call.Assigns) > 0 || len(call.Args) == 0 {
		return allowEntry{}, errors.New("want a command of fixed words")
	}
	words := make([]string, len(call.Args))
	for i, w := range call.Args {
		s, kind := literal(w)
		if kind != wordLiteral {
			return allowEntry{}, fmt.Errorf("word %d is not a fixed word (quote it)", i+1)
		}
		words[i] = s
	}
	if !cleanAbs(words[0]) {
		return allowEntry{}, fmt.Errorf("%q is not a clean absolute path", clip(words[0]))
	}
	return allowEntry{path: words[0], args: words[1:]}, nil
}

// exactEntry renders argv as a command-line allowlist entry: the path
// always quoted (so a command without arguments is not a bare path), the
// arguments quoted where a shell would read them differently.
func exactEntry(argv []string) string {
	var b strings.Builder
	b.WriteString(quote(argv[0]))
	for _, a := range argv[1:] {
		b.WriteByte(' ')
		b.WriteString(quoteIfNeeded(a))
	}
	return b.String()
}

func quoteIfNeeded(s string) string {
	if s == "" {
		return "''"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("_@%+=:,./-", c) >= 0:
		default:
			return quote(s)
		}
	}
	return s
}

// Always is what approving a command "always" adds to the allowlist.
type Always struct {
	// Entries are command-line allowlist entries, one per simple command
	// that missed for its binary or its arguments: the resolved binary
	// with exactly the approved arguments.
	Entries []string `json:"entries,omitempty"`
	// Kept are the simple commands that still need a person every time,
	// each with why.
	Kept []string `json:"kept,omitempty"`
}

// String describes the addition for the person approving.
func (al Always) String() string {
	var b strings.Builder
	if len(al.Entries) == 0 {
		b.WriteString("nothing is added to the allowlist")
	} else {
		b.WriteString("always allow exactly (the same binary with the same arguments):")
		for _, e := range al.Entries {
			b.WriteString("\n  " + e)
		}
	}
	if len(al.Kept) > 0 {
		b.WriteString("\nstill ask every time:")
		for _, k := range al.Kept {
			b.WriteString("\n  " + k)
		}
	}
	return b.String()
}

// AlwaysEntries returns what approving pl "always" adds under the worker
// policy p: an exact entry for each simple command of the plan that is
// neither allowed already nor left to a person by p's rules. A wrapper, or
// a binary whose arguments hit an argument rule, is kept for a person: an
// exact argv pins the words, not what the program they name does with its
// files and input. Binary-wide entries are never added; an operator
// writes those.
func AlwaysEntries(p Policy, pl *Plan) Always {
	var al Always
	if pl == nil {
		return al
	}
	a := newAnalysis(&p)
	for _, argv := range pl.Argv {
		if len(argv) == 0 || !cleanAbs(argv[0]) {
			continue
		}
		resolved, args := argv[0], argv[1:]
		base, realBase := filepath.Base(resolved), a.realBase(resolved)
		shown := clip(strings.Join(argv, " "))
		if isWrapper(base) || isWrapper(realBase) || evalBuiltins[base] {
			al.Kept = appendUnique(al.Kept, shown+": runs another command")
			continue
		}
		if hits := argHits(base, realBase, args, a.argAllow[resolved]); len(hits) > 0 {
			al.Kept = appendUnique(al.Kept, fmt.Sprintf("%s: argument rule %q", shown, hits[0].rule))
			continue
		}
		if a.allowed(resolved, args) || a.safe[resolved] != "" && checkSafeArgs(base, args) == "" {
			continue // passes already
		}
		al.Entries = appendUnique(al.Entries, exactEntry(argv))
	}
	return al
}

// allowed reports whether an allowlist entry of the analysis's policy
// allows resolved with args.
func (a *analysis) allowed(resolved string, args []string) bool {
	return a.allow[resolved] || slices.ContainsFunc(a.exact[resolved], func(e []string) bool {
		return slices.Equal(e, args)
	})
}
