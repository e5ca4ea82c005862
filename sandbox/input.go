package sandbox

import (
	"regexp"
	"strings"

	"github.com/evanw/esbuild/pkg/api"

	"github.com/toolq/toolq/contracts"
)

// Validate checks the exec input as the code-mode contract says: one of code and command
// is non-empty, both agree when both are given, and language is javascript
// (the default) or typescript. It returns the source and the language.
func (in Input) Validate() (source, language string, err error) {
	return (&contracts.CodeModeExecInput{Code: in.Code, Command: in.Command, Language: in.Language}).Script()
}

// forbidden are the module-loading forms exec refuses, in source and in
// transpiled output alike.
var forbidden = []struct {
	re   *regexp.Regexp
	what string
}{
	{regexp.MustCompile(`(?m)(^|[;{}]|\*/)\s*import\s*(["'{*]|[\p{L}_$][\p{L}\p{N}_$]*\s*(,|\bfrom\b))`), "import statements"},
	{regexp.MustCompile(`(?m)(^|[;{}]|\*/)\s*import\s+type\b`), "import statements"},
	{regexp.MustCompile(`\bimport\s*\(`), "dynamic import()"},
	{regexp.MustCompile(`\bimport\s*\.\s*meta\b`), "import.meta"},
	{regexp.MustCompile(`(?m)(^|[;{}]|\*/)\s*export\s+(default\b|\{|\*|const\b|let\b|var\b|function\b|async\b|class\b|type\b|interface\b|enum\b|=)`), "module exports"},
	{regexp.MustCompile(`\brequire\s*(\(|\.\s*(resolve|cache|main)\b)`), "require()"},
	{regexp.MustCompile(`\bimportScripts\s*\(`), "importScripts()"},
	{regexp.MustCompile(`\bmodule\s*\.\s*(exports|require)\b`), "module loaders"},
	{regexp.MustCompile(`\b(System\s*\.\s*import|__webpack_require__|__non_webpack_require__)\b`), "module loaders"},
}

func checkForbidden(src string) error {
	for _, f := range forbidden {
		if f.re.MatchString(src) {
			return contracts.Errorf(contracts.CodeInvalidInput,
				"code mode refuses %s: tools are reached through the tools, MCP and API globals", f.what)
		}
	}
	return nil
}

// wrapPrefix and wrapSuffix make the code the body of an async function, so
// that top-level await and return work.
const (
	wrapPrefix = "(async function () {\n"
	wrapSuffix = "\n})"
)

// prepare validates the input and returns the script whose completion value
// is the run's async function.
func prepare(in Input) (string, error) {
	src, lang, err := in.Validate()
	if err != nil {
		return "", err
	}
	if err := checkForbidden(src); err != nil {
		return "", err
	}
	script := wrapPrefix + src + wrapSuffix
	if lang == LanguageTypeScript {
		res := api.Transform(script, api.TransformOptions{
			Loader:     api.LoaderTS,
			Target:     api.ESNext,
			Sourcefile: "exec.ts",
			LogLevel:   api.LogLevelSilent,
		})
		if len(res.Errors) > 0 {
			e := res.Errors[0]
			msg := e.Text
			if e.Location != nil {
				msg = strings.TrimSpace(e.Location.LineText) + ": " + msg
			}
			return "", contracts.Errorf(contracts.CodeInvalidInput, "TypeScript: %s", msg)
		}
		script = strings.TrimRight(strings.TrimSpace(string(res.Code)), ";")
		if err := checkForbidden(script); err != nil {
			return "", err
		}
	}
	return script, nil
}
