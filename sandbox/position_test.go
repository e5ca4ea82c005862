package sandbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/sandbox"
)

// TestErrorPositions: a failed run names the guest's line and column —
// through the wrapper for JavaScript, through esbuild's source map for
// TypeScript — keeps the thrown error's stack (without toolq's own
// frames), and leaves the code empty: the failure is the guest's.
func TestErrorPositions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name, lang, code string
		wantCode         string
		want             []string
	}{
		{
			name: "throw", code: "const a = 1;\n  throw new Error('boom')",
			want: []string{"Error: boom\n    at <anonymous> (code.js:2:13)"},
		},
		{
			name: "reference error", code: "let y = 2;\nreturn nope + 1",
			want: []string{"ReferenceError: nope is not defined\n    at <anonymous> (code.js:2:8)"},
		},
		{
			name: "nested functions", code: "function f() { throw new TypeError('deep') }\nfunction g() { f() }\n\ng()",
			want: []string{"TypeError: deep\n    at f (code.js:1:26)\n    at g (code.js:2:16)\n    at <anonymous> (code.js:4:1)"},
		},
		{
			name: "after await", code: "await null;\nthrow new RangeError('later')",
			want: []string{"RangeError: later\n    at <anonymous> (code.js:2:11)"},
		},
		{
			name: "thrown string", code: "throw 'x'",
			want: []string{"x"},
		},
		{
			name: "typescript", lang: "typescript",
			code: "interface A { x: number }\ntype B = A;\nconst a: A = {x: 1};\n\nthrow new Error('ts boom ' + a.x)",
			want: []string{"Error: ts boom 1\n    at <anonymous> (code.ts:5:30)"},
		},
		{
			name: "syntax error", code: "const a = 1;\nconst b = a +* 2;",
			wantCode: "invalid_input", want: []string{"SyntaxError: line 2, column 14: Unexpected \"*\" (const b = a +* 2;)"},
		},
		{
			name: "syntax error at the end", code: "const a = 1;\nreturn (",
			wantCode: "invalid_input", want: []string{"SyntaxError: line 2, column 9 (the end of the code): Unexpected the end of the code"},
		},
		{
			name: "typescript syntax error", lang: "typescript", code: "interface A { x: number }\nconst a: = 1",
			wantCode: "invalid_input", want: []string{"TypeScript: line 2, column 10: Unexpected \"=\" (const a: = 1)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := b.e.Exec(context.Background(), &sandbox.ExecRequest{
				Input: sandbox.Input{Code: tt.code, Language: tt.lang}, Catalog: testCatalog(), Bridge: b.bridge,
			})
			require.NoError(t, err)
			require.Equal(t, sandbox.StatusFailed, out.Result.Status)
			require.Equal(t, tt.wantCode, string(out.Result.Code))
			for _, w := range tt.want {
				require.Contains(t, out.Result.Error, w)
			}
			require.NotContains(t, out.Result.Error, "toolq:runtime")
			require.NotContains(t, out.Result.Error, "exec.js")
		})
	}
}

// TestErrorPositionsAfterResume: the source map travels in the snapshot,
// so a TypeScript run that fails after a resume names the guest's line.
func TestErrorPositionsAfterResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code := "type N = number;\nconst n: N = await tools.callValue('client:app:slow_add', {a: 1, b: 2});\n\n\nif (n > 2) throw new Error('too big: ' + n);\nreturn n;"
	out, err := b.e.Exec(context.Background(), &sandbox.ExecRequest{
		Input: sandbox.Input{Code: code, Language: "typescript"}, Catalog: testCatalog(), Bridge: b.bridge, RunID: "run-1",
	})
	require.NoError(t, err)
	require.Equal(t, sandbox.StatusWaiting, out.Result.Status, out.Result.Error)
	b.steps.Store(string(out.Snapshot), out.Step)
	res := b.resume(t, out.Snapshot, ok("call_1", 3))
	require.Equal(t, sandbox.StatusFailed, res.Result.Status)
	require.Empty(t, res.Result.Code)
	require.Contains(t, res.Result.Error, "Error: too big: 3\n    at <anonymous> (code.ts:5:")
}
