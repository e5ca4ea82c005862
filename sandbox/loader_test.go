package sandbox_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/sandbox"
)

// TestLoaderCheckParses: module loading is refused by a parse, so text that
// only looks like a loader runs, and every loader form — escaped, aliased,
// computed — is refused with invalid_input.
func TestLoaderCheckParses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	harmless := []struct{ code, want string }{
		{`const s = "import(x) and require('fs')"; return s.length`, `27`},
		{`// import("fs"); require("fs")
		/* module.exports = 1 */ return 1`, `1`},
		{`return /import\(|require\(/.test("import(")`, `true`},
		{`const api = {import(x) { return x + 1 }, require: 2}; return api.import(1) + api.require`, `4`},
		{"return `import(${1})`", `"import(1)"`},
		{`function f(require) { return require(2) } return f((x) => x * 3)`, `6`},
		{`const module = {exports: 5}; return module.exports`, `5`},
		{`const o = {}; o.require = () => 7; return o.require()`, `7`},
		{`return typeof globalThis.require`, `"undefined"`},
		{`const importer = 1, exportsList = [2]; return importer + exportsList[0]`, `3`},
	}
	for _, tt := range harmless {
		t.Run("runs "+tt.code, func(t *testing.T) {
			t.Parallel()
			requireCompleted(t, b.exec(t, tt.code, sandbox.Limits{}), tt.want)
		})
	}
	refused := []string{
		`return r\u0065quire("fs")`,
		`return (0, require)("fs")`,
		`const load = require; return load("fs")`,
		`return typeof require`,
		`const m = "fs"; return await import(m)`,
		`return await import("f" + "s")`,
		`return await im\u0070ort("fs")`,
		`return import.meta`,
		`return module.exports`,
		`exports.x = 1`,
		`return System.import("x")`,
		`return __webpack_require__(1)`,
		`import fs from "fs"`,
		`export default 1`,
	}
	for _, code := range refused {
		t.Run("refused "+code, func(t *testing.T) {
			t.Parallel()
			out := b.exec(t, code, sandbox.Limits{})
			require.Equal(t, sandbox.StatusFailed, out.Result.Status, "value: %s", out.Result.Value)
			require.Equal(t, contracts.CodeInvalidInput, out.Result.Code, out.Result.Error)
		})
	}
	// TypeScript is checked after it is transpiled.
	out, err := b.e.Exec(t.Context(), &sandbox.ExecRequest{Input: sandbox.Input{
		Code: `const load: (m: string) => unknown = require; return load("fs")`, Language: sandbox.LanguageTypeScript,
	}})
	require.NoError(t, err)
	requireFailed(t, out, "invalid_input", "require()")
	out, err = b.e.Exec(t.Context(), &sandbox.ExecRequest{Input: sandbox.Input{
		Code: `const s: string = "require('x')"; return s`, Language: sandbox.LanguageTypeScript,
	}})
	require.NoError(t, err)
	requireCompleted(t, out, `"require('x')"`)
}
