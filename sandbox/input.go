package sandbox

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/evanw/esbuild/pkg/api"

	"github.com/toolq/toolq/contracts"
)

// Validate checks the exec input as the code-mode contract says: one of code and command
// is non-empty, both agree when both are given, and language is javascript
// (the default) or typescript. It returns the source and the language.
func (in Input) Validate() (source, language string, err error) {
	return (&contracts.CodeModeExecInput{Code: in.Code, Command: in.Command, Language: in.Language}).Script()
}

// Module loading is refused by a parse, not by matching text: esbuild
// parses the script (the wrapped source, or the JavaScript a TypeScript
// input became), so text inside strings, comments, regular expressions and
// property names (api.import(…)) is never mistaken for a loader, and escaped
// or aliased forms (r\u0065quire, (0, require)(…), const load = require)
// are seen for what they are. Two transforms:
//
//  1. Lowering dynamic import for an engine without it: esbuild rewrites
//     every import(…) — string or not — into a call of a free require, and
//     reports import.meta (empty-import-meta). Free references to require in
//     the source are renamed first, to a per-check random name, so the two
//     stay apart.
//  2. Renaming the free identifiers of module loaders (require, module,
//     exports, importScripts, System.import and bundlers' requires) to
//     random names. esbuild renames only unbound references: a local
//     variable or parameter called require, a property named require, and
//     text are left alone.
//
// A random name in the output means the code refers to a loader; the names
// are fresh per check, so no input can spell them. Import and export
// statements cannot stand in a function body: they are syntax errors, also
// refused with invalid_input.
type loaderNames struct{ require, dynImport, module string }

func newLoaderNames() loaderNames {
	var b [8]byte
	_, _ = rand.Read(b[:])
	n := hex.EncodeToString(b[:])
	return loaderNames{require: "__toolq_require_" + n, dynImport: "__toolq_import_" + n, module: "__toolq_module_" + n}
}

func refusal(what string) error {
	return contracts.Errorf(contracts.CodeInvalidInput,
		"code mode refuses %s: tools are reached through the tools, MCP and API globals", what)
}

// checkLoaders parses script (JavaScript, already wrapped) and refuses any
// module-loading form. Syntax errors are invalid_input too, at the guest's
// line and column (pos).
func checkLoaders(script string, pos *positions) error {
	names := newLoaderNames()
	first := api.Transform(script, api.TransformOptions{
		Loader:    api.LoaderJS,
		Format:    api.FormatCommonJS,
		Supported: map[string]bool{"dynamic-import": false},
		Define:    map[string]string{"require": names.require},
		LogLevel:  api.LogLevelSilent,
	})
	if len(first.Errors) > 0 {
		return syntaxError("SyntaxError", first.Errors[0], pos.script)
	}
	for _, w := range first.Warnings {
		if w.ID == "empty-import-meta" {
			return refusal("import.meta")
		}
	}
	second := api.Transform(string(first.Code), api.TransformOptions{
		Loader: api.LoaderJS,
		Define: map[string]string{
			"require":                 names.dynImport,
			"module":                  names.module,
			"exports":                 names.module,
			"importScripts":           names.module,
			"System.import":           names.module,
			"__webpack_require__":     names.module,
			"__non_webpack_require__": names.module,
		},
		LogLevel: api.LogLevelSilent,
	})
	if len(second.Errors) > 0 {
		return syntaxError("SyntaxError", second.Errors[0], pos.script)
	}
	out := string(second.Code)
	switch {
	case strings.Contains(out, names.dynImport):
		return refusal("dynamic import()")
	case strings.Contains(out, names.require):
		return refusal("require()")
	case strings.Contains(out, names.module):
		return refusal("module loaders")
	}
	return nil
}

// syntaxError reports a parse error at the guest's line and column (where
// maps esbuild's 1-based line and 1-based column), with the text of the
// line; an import or export statement (which a function body cannot hold)
// is named as the refusal it is.
func syntaxError(kind string, m api.Message, where func(line, col int) (gline, gcol int, end, ok bool)) error {
	msg := m.Text
	if m.Location != nil {
		text := strings.TrimSpace(m.Location.LineText)
		for _, kw := range []string{"import", "export"} {
			if rest, ok := strings.CutPrefix(text, kw); ok && (rest == "" || !isIdentPart(rest[0])) {
				return contracts.Errorf(contracts.CodeInvalidInput,
					"code mode refuses %s statements: tools are reached through the tools, MCP and API globals (%s)", kw, clipText(text+": "+msg, 200))
			}
		}
		col := utf8.RuneCountInString(m.Location.LineText[:min(max(m.Location.Column, 0), len(m.Location.LineText))]) + 1
		line, col, end, ok := where(m.Location.Line, col)
		switch {
		case ok && end:
			// The wrapper's closing brace is not the guest's: say what it is.
			msg = fmt.Sprintf("line %d, column %d (the end of the code): %s", line, col, strings.ReplaceAll(msg, `"}"`, "the end of the code"))
		case ok:
			msg = fmt.Sprintf("line %d, column %d: %s (%s)", line, col, msg, clipText(text, 200))
		}
	}
	return contracts.Errorf(contracts.CodeInvalidInput, "%s: %s", kind, clipText(msg, 1000))
}

func isIdentPart(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// wrapPrefix and wrapSuffix make the code the body of an async function, so
// that top-level await and return work.
const (
	wrapPrefix = "(async function () {\n"
	wrapSuffix = "\n})"
)

// prepare validates the input and returns the script whose completion value
// is the run's async function, and the map of its positions back to the
// guest's code.
func prepare(in Input, scope string) (string, *positions, error) {
	src, lang, err := in.Validate()
	if err != nil {
		return "", nil, err
	}
	script := wrapPrefix + src + wrapSuffix
	pos := newPositions(src, false, "")
	if lang == LanguageTypeScript {
		res := api.Transform(script, api.TransformOptions{
			Loader:     api.LoaderTS,
			Target:     api.ESNext,
			Sourcefile: guestTS,
			Sourcemap:  api.SourceMapExternal,
			LogLevel:   api.LogLevelSilent,
		})
		if len(res.Errors) > 0 {
			return "", nil, syntaxError("TypeScript", res.Errors[0], pos.source)
		}
		var sm struct {
			Mappings string `json:"mappings"`
		}
		if err := json.Unmarshal(res.Map, &sm); err != nil {
			return "", nil, fmt.Errorf("sandbox: esbuild source map: %w", err)
		}
		pos = newPositions(src, true, sm.Mappings)
		script = strings.TrimRight(strings.TrimSpace(string(res.Code)), ";")
	}
	if err := checkLoadersOnce(scope, script, pos); err != nil {
		return "", nil, err
	}
	return script, pos, nil
}

// acceptedMax bounds the scripts whose loader check is remembered.
const acceptedMax = 4096

// accepted remembers, by SHA-256 of scope and script, the scripts
// checkLoaders passed: the check is a pure function of the script's text,
// and the same code is run again and again (a pipeline's runs, an agent's
// retries), while its two esbuild transforms cost more CPU than the rest of
// a short run's exec. Only a pass is remembered; a refusal is parsed again,
// to be reported. The scope (a tenant) keeps one tenant from timing whether
// another ran a given code.
var accepted = struct {
	sync.Mutex
	by map[[sha256.Size]byte]struct{}
}{by: map[[sha256.Size]byte]struct{}{}}

// checkLoadersOnce is checkLoaders for a script not passed before in scope.
func checkLoadersOnce(scope, script string, pos *positions) error {
	sum := acceptedKey(scope, script)
	accepted.Lock()
	_, ok := accepted.by[sum]
	accepted.Unlock()
	if ok {
		return nil
	}
	if err := checkLoaders(script, pos); err != nil {
		return err
	}
	accepted.Lock()
	if len(accepted.by) >= acceptedMax {
		clear(accepted.by)
	}
	accepted.by[sum] = struct{}{}
	accepted.Unlock()
	return nil
}

// clipText cuts s to at most n bytes on a rune boundary, saying how much
// was cut.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const note = "… (%d bytes cut)"
	keep := max(n-len(note)-8, 0)
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + fmt.Sprintf(note, len(s)-keep)
}

// acceptedKey is the key of a script's pass in scope.
func acceptedKey(scope, script string) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(strconv.Itoa(len(scope))))
	h.Write([]byte{0})
	h.Write([]byte(scope))
	h.Write([]byte(script))
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
