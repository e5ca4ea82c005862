package tooldefs

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/toolq/toolq/contracts"
)

// maxIndexLine bounds one line of the quick index.
const maxIndexLine = 240

// codeModeDefs are the definitions of code_mode.exec (its description
// carrying the quick index of entries) and code_mode.wait.
func codeModeDefs(entries []contracts.CatalogTool, c *Config, names *namer) (exec, wait Definition) {
	execName := names.name(contracts.ToolCodeModeExec)
	waitName := names.name(contracts.ToolCodeModeWait)
	result := mustObject(contracts.CodeModeResultSchema())
	exec = Definition{
		Name: execName, Tool: contracts.ToolCodeModeExec,
		Description: execDescription(waitName) + quickIndex(entries, c),
		InputSchema: mustObject(contracts.CodeModeExecInputSchema()), OutputSchema: result,
	}
	wait = Definition{
		Name: waitName, Tool: contracts.ToolCodeModeWait,
		Description: "Resume a code-mode run that " + execName + " (or an earlier " + waitName + ") left waiting, " +
			"once its nested tool calls are back, and return its result, of the same shape as " + execName + "'s: " +
			"completed, failed, or waiting again. Pass the runId of the waiting result; a run of another session, " +
			"an unknown or expired run, and a run already being resumed fail with code invalid_input.",
		InputSchema: mustObject(contracts.CodeModeWaitInputSchema()), OutputSchema: result,
	}
	return exec, wait
}

func execDescription(wait string) string {
	return `Run JavaScript (or TypeScript, with language "typescript") in an isolated QuickJS sandbox and return its result. ` +
		`The code is the body of an async function: await and return work, and the returned value is the result's value. ` +
		`There is no import, require, network, file system or environment.
In the code:
- tools.search(query, {limit}) finds tools of the catalog; tools.describe(id) gives one's full input and output schema;
- await tools.callValue(id, input) calls a tool and returns its value, tools.call(id, input) its whole result; tools.<name>(input) calls a tool by its unambiguous short name; independent calls can run in parallel (Promise.all);
- MCP.<server>.<tool>(input) calls an MCP server's tool (the only way to call one); API.list("mcp") and API.read("mcp/<server>.d.ts") describe them;
- ALL_TOOLS lists the catalog; text(value) and json(value) add to the output; yield_control() suspends the run.
Result: {status: "completed", value, output?, telemetry} | {status: "waiting", runId, reason: "pending_tools" | "yield", pendingToolCalls?, output?, telemetry} | {status: "failed", error, code?, output?, telemetry}. ` +
		`When it is waiting, call ` + wait + ` with its runId to get the rest.`
}

// quickIndex is the code-mode contract's bounded quick index: one line per
// catalog entry a run may call (not MCP entries, which the MCP namespace
// describes, nor direct-only, code-mode or, unless the workers allow it,
// the shell exec tool), with the entry's exact id, a compact input hint
// and, for the workers' own tools, an output hint. No descriptions, no full
// schemas; past the bounds it says how many more there are.
func quickIndex(entries []contracts.CatalogTool, c *Config) string {
	var lines []string
	for _, e := range entries {
		switch {
		case e.Validate() != nil, e.Source == contracts.SourceMCP, e.DirectOnly, contracts.IsCodeModeTool(e.Tool):
			continue
		case e.Tool == contracts.ToolExec && !c.ShellExec:
			continue
		}
		line := "- " + e.ID + "(" + orUnknown(contracts.TypeHint(e.InputSchema)) + ")"
		if e.Source == contracts.SourceToolq {
			if h := contracts.TypeHint(e.OutputSchema); h != "" && h != "unknown" {
				line += " → " + h
			}
		}
		lines = append(lines, clip(line, maxIndexLine))
	}
	if len(lines) == 0 {
		return "\nThe catalog is empty or not readable here: find tools with tools.search."
	}
	var b strings.Builder
	b.WriteString("\nTools (catalog id(input) → output; tools.describe(id) for more):")
	shown := 0
	for _, l := range lines {
		if shown == c.IndexMaxEntries || b.Len()+len(l)+1 > c.IndexMaxBytes {
			break
		}
		b.WriteString("\n" + l)
		shown++
	}
	if rest := len(lines) - shown; rest > 0 {
		fmt.Fprintf(&b, "\n… and %d more: find them with tools.search.", rest)
	}
	return b.String()
}

func orUnknown(h string) string {
	if h == "" {
		return "unknown"
	}
	return h
}

func mustObject(schema []byte) json.RawMessage {
	s, err := objectSchema(schema)
	if err != nil {
		panic("tooldefs: an embedded schema is not an object schema: " + err.Error())
	}
	return s
}
