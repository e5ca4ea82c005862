package sandbox_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/sandbox"
)

func TestInputValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		in       sandbox.Input
		wantSrc  string
		wantLang string
		wantErr  string
	}{
		{"code", sandbox.Input{Code: "return 1"}, "return 1", "javascript", ""},
		{"command alias", sandbox.Input{Command: "return 2"}, "return 2", "javascript", ""},
		{"both agree", sandbox.Input{Code: "return 3", Command: "return 3"}, "return 3", "javascript", ""},
		{"both differ", sandbox.Input{Code: "return 3", Command: "return 4"}, "", "", "differ"},
		{"neither", sandbox.Input{}, "", "", "needs code"},
		{"blank", sandbox.Input{Code: "  \n"}, "", "", "needs code"},
		{"typescript", sandbox.Input{Code: "return 1", Language: "typescript"}, "return 1", "typescript", ""},
		{"bad language", sandbox.Input{Code: "return 1", Language: "python"}, "", "", "language must be"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src, lang, err := tt.in.Validate()
			if tt.wantErr != "" {
				require.ErrorIs(t, err, contracts.ErrInvalidInput)
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantSrc, src)
			require.Equal(t, tt.wantLang, lang)
		})
	}
}

func TestExecResults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name, code, want string
	}{
		{"number", "return 1 + 2", "3"},
		{"no return", "const x = 1", "null"},
		{"top-level await", "const v = await Promise.resolve(41); return v + 1", "42"},
		{"object", "return {a: [1, 'two', null], b: true}", `{"a":[1,"two",null],"b":true}`},
		{"undefined fields dropped", "return {a: undefined, b: 1}", `{"b":1}`},
		{"unicode", "return 'héllo 世界 🎉'", `"héllo 世界 🎉"`},
		{"lone surrogate", "return '\\ud800x'", `"\ufffdx"`},
		{"date and clock", "return Date.now() > 1.7e12 && performance.now() >= 0", "true"},
		{"seed example", `const [shipmentTool] = await tools.search("list shipments");
const shipments = await tools.callValue(shipmentTool.id, {});
return shipments.filter((shipment) => !shipment.paid && shipment.tons > 10);`, `[{"id":"s1","paid":false,"tons":12}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireCompleted(t, b.exec(t, tt.code, sandbox.Limits{}), tt.want)
		})
	}
}

func TestExecOutput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := b.exec(t, `text("hello"); text({a: 1}); text(5); json({b: [2]}); json(undefined); text("bad \ud800 surrogate"); return "done"`, sandbox.Limits{})
	requireCompleted(t, out, `"done"`)
	got, err := json.Marshal(out.Result.Output)
	require.NoError(t, err)
	require.JSONEq(t, `[{"type":"text","text":"hello"},{"type":"text","text":"{\"a\":1}"},{"type":"text","text":"5"},
		{"type":"json","value":{"b":[2]}},{"type":"json","value":null},{"type":"text","text":"bad \ufffd surrogate"}]`, string(got))
	for _, o := range out.Result.Output {
		require.True(t, utf8.ValidString(o.Text))
	}
}

func TestExecFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name, code, wantCode, wantErr string
	}{
		{"throw", "throw new TypeError('nope')", "", "TypeError: nope"},
		{"throw string", "throw 'plain'", "", "plain"},
		{"async throw", "await null; throw new RangeError('later')", "", "RangeError: later"},
		{"syntax", "return (", "invalid_input", "SyntaxError"},
		{"unserializable", "return 10n", "", "not JSON-serializable"},
		{"never settles", "await new Promise(() => {})", "", "nothing will settle"},
		{"failing tool", "return await tools.callValue('openclaw:core:explode', {})", "", "Error: tool exploded"},
		{"unknown tool", "return await tools.callValue('openclaw:core:nope', {})", "", "not in this run's catalog"},
		{"mcp id via tools.describe", "return await tools.describe('mcp:github:create_issue')", "", "unknown tool"},
		{"mcp id via tools.callValue", "return await tools.callValue('mcp:github:create_issue', {})", "", "call it as MCP.github.createIssue(input)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireFailed(t, b.exec(t, tt.code, sandbox.Limits{}), tt.wantCode, tt.wantErr)
		})
	}
}

// TestSandboxEscapes covers the contract's "import, require, file system,
// network and environment access fail" item.
func TestSandboxEscapes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	refused := []string{
		`import fs from "fs"; return 1`,
		`import { readFile } from "node:fs"`,
		`import * as os from "os"`,
		`import "x"`,
		`const m = await import("fs")`,
		`const m = await import ("fs")`,
		`const fs = require("fs")`,
		`require.resolve("x")`,
		`return import.meta.url`,
		`export default 1`,
		`importScripts("http://x")`,
		`module.exports = 1`,
	}
	for _, code := range refused {
		t.Run("refused "+code, func(t *testing.T) {
			t.Parallel()
			requireFailed(t, b.exec(t, code, sandbox.Limits{}), "invalid_input", "code mode refuses")
		})
	}
	absent := []string{
		`return globalThis["req" + "uire"]("fs")`,
		`return process.env.HOME`,
		`return fetch("http://127.0.0.1/")`,
		`return new XMLHttpRequest()`,
		`return new WebSocket("ws://127.0.0.1/")`,
		`return std.loadFile("/etc/passwd")`,
		`return os.readdir("/")`,
		`return Deno.env.get("HOME")`,
		`return Bun.file("/etc/passwd")`,
		`return console.log("x")`,
		`return setTimeout(() => {}, 1)`,
		`return eval("1")`,
		`return Function("return 1")()`,
		`return (function () {}).constructor("return 1")()`,
		`return (async function () {}).constructor("return 1")()`,
		`return (function* () {}).constructor("yield 1")().next()`,
		`return (async function* () {}).constructor("yield 1")`,
		`return Reflect.construct(Object.getPrototypeOf(() => 1).constructor, ["return 1"])()`,
		`return [].map.constructor("return 1")()`,
	}
	for _, code := range absent {
		t.Run("absent "+code, func(t *testing.T) {
			t.Parallel()
			out := b.exec(t, code, sandbox.Limits{})
			require.Equal(t, sandbox.StatusFailed, out.Result.Status, "value %s", out.Result.Value)
			require.Regexp(t, `ReferenceError|TypeError`, out.Result.Error)
		})
	}
	t.Run("globals", func(t *testing.T) {
		t.Parallel()
		requireCompleted(t, b.exec(t, `return ["eval", "Function", "require", "process", "fetch", "std", "os", "console", "setTimeout", "XMLHttpRequest"].map((k) => typeof globalThis[k])`, sandbox.Limits{}),
			`["undefined","undefined","undefined","undefined","undefined","undefined","undefined","undefined","undefined","undefined"]`)
	})
}

func TestTypeScript(t *testing.T) {
	t.Parallel()
	b := setup(t)
	code := `
interface Shipment { id: string; paid: boolean; tons: number }
type Heavy = Shipment & { heavy: true };
enum Unit { Ton = "t" }
function heavy<T extends Shipment>(s: T): s is T & Heavy { return s.tons > 10; }
const list = (await tools.callValue("openclaw:shipping:shipping_list", {})) as Shipment[];
const names: string[] = list.filter(heavy).map((s: Shipment): string => s.id + Unit.Ton);
return names;`
	out, err := b.e.Exec(context.Background(), &sandbox.ExecRequest{
		Input: sandbox.Input{Code: code, Language: "typescript"}, Catalog: testCatalog(), Bridge: b.bridge,
	})
	require.NoError(t, err)
	requireCompleted(t, out, `["s1t","s2t"]`)

	for _, bad := range []string{`import type { X } from "y"; return 1`, `const x: = 1`} {
		out, err = b.e.Exec(context.Background(), &sandbox.ExecRequest{Input: sandbox.Input{Code: bad, Language: "typescript"}})
		require.NoError(t, err)
		requireFailed(t, out, "invalid_input", "")
	}
}

func TestGuestRuntime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tests := []struct {
		name, code, want string
	}{
		{
			"ALL_TOOLS has no MCP entries", `return ALL_TOOLS.map((t) => t.id)`,
			`["openclaw:core:echo","openclaw:shipping:shipping_list","openclaw:core:explode","client:app:slow_add","openclaw:core:exec","openclaw:one:dup","openclaw:two:dup","openclaw:core:search"]`,
		},
		{
			"ALL_TOOLS entries are compact", `return Object.keys(ALL_TOOLS[1]).sort()`,
			`["description","id","input","name","source"]`,
		},
		{"search ranks", `return (await tools.search("shipments")).map((t) => t.id)`, `["openclaw:shipping:shipping_list"]`},
		{"search limit", `return (await tools.search("", {limit: 2})).length`, `2`},
		{"search default limit", `return (await tools.search("")).length`, `8`},
		{"search skips mcp", `return (await tools.search("issue")).length`, `0`},
		{
			"describe", `const d = await tools.describe("openclaw:shipping:shipping_list"); return [d.id, d.parameters, d.outputSchema]`,
			`["openclaw:shipping:shipping_list",{"type":"object"},{"type":"array"}]`,
		},
		{
			"call envelope", `return [await tools.call("openclaw:core:echo", {x: 1}), await tools.call("openclaw:core:explode")]`,
			`[{"ok":true,"value":{"x":1}},{"ok":false,"error":"tool exploded"}]`,
		},
		{"safe name", `return await tools.echo({y: 2})`, `{"y":2}`},
		{"exec by safe name is the shell tool entry", `return typeof tools.exec`, `"function"`},
		{"ambiguous name not installed", `return typeof tools.dup`, `"undefined"`},
		{"helpers not shadowed", `return [typeof tools.search, (await tools.search("echo", {limit: 1}))[0].id]`, `["function","openclaw:core:echo"]`},
		{"tools frozen", `"use strict"; try { tools.search = 1 } catch (e) { return e.name } return "writable"`, `"TypeError"`},
		{
			"MCP namespace", `return [Object.keys(MCP), Object.keys(MCP.github).sort(), typeof namespaces.mcp.github.createIssue]`,
			`[["github"],["$api","createIssue"],"function"]`,
		},
		{"MCP call", `const [r] = await Promise.all([MCP.github.createIssue({owner: "o", repo: "r", title: "t"}), null]); return r`, `{"number":7}`},
		{"MCP $api", `return (await MCP.github.$api()).includes("function createIssue(input: { owner: string; repo: string; title: string }): Promise<McpToolResult>")`, `true`},
		{
			"API list and read", `const files = await API.list("mcp"); return [files, (await API.read(files[0])).startsWith("declare namespace MCP.github")]`,
			`[["mcp/github.d.ts"],true]`,
		},
		{"API read unknown", `try { await API.read("mcp/nope.d.ts") } catch (e) { return e.message }`, `"API file not found: mcp/nope.d.ts"`},
		{
			"host errors are plain Errors", `try { await tools.callValue("openclaw:core:explode") } catch (e) { return [e instanceof Error, e.constructor === Error, e.message] }`,
			`[true,true,"tool exploded"]`,
		},
		{"Math.random is seeded", `const a = Math.random(); return a >= 0 && a < 1 && a !== Math.random()`, `true`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireCompleted(t, b.exec(t, tt.code, sandbox.Limits{}), tt.want)
		})
	}

	t.Run("search max limit", func(t *testing.T) {
		t.Parallel()
		many := make([]sandbox.Tool, 80)
		for i := range many {
			many[i] = tool("openclaw:bulk:t"+strings.Repeat("x", i), "bulk", "bulk tool", "{}")
		}
		out, err := b.e.Exec(context.Background(), &sandbox.ExecRequest{
			Input:   sandbox.Input{Code: `return [(await tools.search("bulk", {limit: 500})).length, (await tools.search("bulk")).length]`},
			Catalog: many,
			Limits:  sandbox.Limits{SearchDefaultLimit: 5},
		})
		require.NoError(t, err)
		requireCompleted(t, out, `[50,5]`)
	})

	t.Run("random differs between runs", func(t *testing.T) {
		t.Parallel()
		a := b.exec(t, `return Math.random()`, sandbox.Limits{})
		c := b.exec(t, `return Math.random()`, sandbox.Limits{})
		require.NotEqual(t, string(a.Result.Value), string(c.Result.Value))
	})

	t.Run("telemetry", func(t *testing.T) {
		t.Parallel()
		out := b.exec(t, `await tools.search("x"); await tools.describe("openclaw:core:echo"); await tools.echo(1); return 1`, sandbox.Limits{})
		requireCompleted(t, out, `1`)
		require.Equal(t, sandbox.BridgeCalls{Search: 1, Describe: 1, Call: 1}, out.Result.Telemetry.BridgeCalls)
	})
}
