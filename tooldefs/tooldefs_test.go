package tooldefs_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tooldefs"
	"github.com/toolq/toolq/tooldefs/tooldefstest"
)

// catalog is a catalog as workers write it: the builtins, code_execution
// and exec with their workers' schemas, an MCP server's tool, a
// direct-only tool, a default-tenant client tool and an entry nobody
// should trust.
func catalog() []contracts.CatalogTool {
	return []contracts.CatalogTool{
		{
			ID: "toolq:core:noop", Tool: "noop", Name: "noop", Source: "toolq", Description: "Return the input unchanged (diagnostics).",
			InputSchema: json.RawMessage(`{}`), OutputSchema: json.RawMessage(`{}`),
		},
		{
			ID: "toolq:core:sleep", Tool: "sleep", Name: "sleep", Source: "toolq", Description: "Wait the given milliseconds.",
			InputSchema:  json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer","minimum":0,"maximum":3600000}},"required":["ms"],"additionalProperties":false}`),
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"slept_ms":{"type":"integer"}},"required":["slept_ms"],"additionalProperties":false}`),
		},
		{
			ID: "toolq:core:code_execution", Tool: "code_execution", Name: "code_execution", Source: "toolq", Description: "Run an analysis task in a provider's sandbox.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"task":{"type":"string"},"provider":{"type":"string","enum":["xai","openai","gemini","anthropic"]},"model":{"type":"string"},"maxTurns":{"type":"integer","minimum":1},"timeoutSeconds":{"type":"number","exclusiveMinimum":0},"failover":{"type":"array","items":{"type":"string"}}},"required":["task"]}`),
		},
		{
			ID: "toolq:core:exec", Tool: "exec", Name: "exec", Source: "toolq", Description: "Run a shell command under the worker's exec policy.", SideEffects: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"},"workdir":{"type":"string"},"env":{"type":"object","additionalProperties":{"type":"string"}},"timeout":{"type":"integer","minimum":1}},"required":["command"]}`),
		},
		{
			ID: "mcp:github:create_issue", Tool: "mcp.github.create_issue", Name: "create_issue", Source: "mcp", Description: "Create a GitHub issue.",
			InputSchema:  json.RawMessage(`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"owner":{"$ref":"#/$defs/login"},"title":{"type":["string","null"]}},"required":["owner"],"$defs":{"login":{"type":"string","minLength":1}}}`),
			OutputSchema: json.RawMessage(`{"type":"object"}`),
		},
		{
			ID: "toolq:core:computer", Tool: "computer", Name: "computer", Source: "toolq", Description: "Use the screen.", DirectOnly: true,
			InputSchema: json.RawMessage(`{"type":"object","properties":{"action":{"type":"string","enum":["click","type"]}},"required":["action"]}`),
		},
		{
			ID: "client:app:pick_file", Name: "pick_file", Source: "client", Description: "Ask the user for a file.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"prompt":{"type":"string"}}}`),
		},
		{ID: "toolq:core:bad id", Tool: "bad", Name: "bad", Source: "toolq"},
	}
}

func names(s *tooldefs.Surface) []string {
	var out []string
	for _, d := range s.Definitions {
		out = append(out, d.Name)
	}
	return out
}

func TestBuildHonoursCodeModeGating(t *testing.T) {
	t.Parallel()
	plain := []string{"code_execution", "computer", "exec", "mcp_github_create_issue", "noop", "sleep"}
	code := []string{"code_mode_exec", "code_mode_wait", "computer"}
	for _, tc := range []struct {
		cfg  *tooldefs.Config
		want []string
	}{
		{nil, plain}, // auto for no model: off
		{&tooldefs.Config{CodeMode: "false"}, plain},
		{&tooldefs.Config{CodeMode: "true"}, code},
		{&tooldefs.Config{Model: "gpt-9-mini", PreferredModels: []string{"claude-x", "gpt-9*"}}, code},
		{&tooldefs.Config{CodeMode: "auto", Model: "claude-x", PreferredModels: []string{"claude-x"}}, code},
		{&tooldefs.Config{CodeMode: "auto", Model: "claude-xl", PreferredModels: []string{"claude-x"}}, plain},
		{&tooldefs.Config{CodeMode: "false", Model: "gpt-9", PreferredModels: []string{"gpt-9"}}, plain},
	} {
		s, err := tooldefs.Build(catalog(), tc.cfg)
		require.NoError(t, err)
		require.Equal(t, tc.want, names(s), "%+v", tc.cfg)
		require.Equal(t, tc.want[0] == "code_mode_exec", s.CodeMode)
		require.Len(t, s.Skipped, 1, "the entry with a bad id")
		d, ok := s.Lookup("computer")
		require.True(t, ok, "a direct-only tool stays visible")
		require.Equal(t, "computer", d.Tool)
	}
	_, err := tooldefs.Build(catalog(), &tooldefs.Config{CodeMode: "maybe"})
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
}

func TestCodeModeDefinitions(t *testing.T) {
	t.Parallel()
	s, err := tooldefs.Build(catalog(), &tooldefs.Config{CodeMode: "true"})
	require.NoError(t, err)
	exec, ok := s.Lookup("code_mode_exec")
	require.True(t, ok)
	require.Equal(t, contracts.ToolCodeModeExec, exec.Tool)
	wait, _ := s.Lookup("code_mode_wait")
	require.Equal(t, contracts.ToolCodeModeWait, wait.Tool)

	// The input schemas are contracts', with a flat language enum.
	var in struct {
		Type       string `json:"type"`
		Properties struct {
			Language struct {
				Enum []string `json:"enum"`
			} `json:"language"`
		} `json:"properties"`
		Schema *string `json:"$schema"`
	}
	require.NoError(t, json.Unmarshal(exec.InputSchema, &in))
	require.Equal(t, "object", in.Type)
	require.Equal(t, []string{"javascript", "typescript"}, in.Properties.Language.Enum)
	require.Nil(t, in.Schema, "$schema is taken off the top")
	require.Contains(t, string(wait.InputSchema), `"runId"`)
	require.NotEmpty(t, exec.OutputSchema)

	// The description has the result shapes and the quick index: exact
	// ids and input hints, output hints for the workers' tools, client
	// tools without one, no MCP, direct-only or shell exec entries.
	desc := exec.Description
	for _, want := range []string{
		`status: "waiting", runId`, "call code_mode_wait with its runId",
		"- toolq:core:noop(unknown)\n",
		"- toolq:core:sleep({ ms: number }) → { slept_ms: number }",
		"- toolq:core:code_execution({ failover?: string[]; maxTurns?: number;",
		"- client:app:pick_file({ prompt?: string })\n",
	} {
		require.Contains(t, desc, want)
	}
	for _, not := range []string{"mcp:github", "computer", "toolq:core:exec", "Create a GitHub issue", "Wait the given"} {
		require.NotContains(t, desc, not)
	}
	s, err = tooldefs.Build(catalog(), &tooldefs.Config{CodeMode: "true", ShellExec: true})
	require.NoError(t, err)
	exec, _ = s.Lookup("code_mode_exec")
	require.Contains(t, exec.Description, "- toolq:core:exec({ command: string;")
}

func TestQuickIndexIsBounded(t *testing.T) {
	t.Parallel()
	var many []contracts.CatalogTool
	for i := range 100 {
		many = append(many, contracts.CatalogTool{
			ID: fmt.Sprintf("toolq:pack:t%03d", i), Tool: fmt.Sprintf("t%03d", i), Name: "t", Source: "toolq",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`), UpdatedAt: time.Now(),
		})
	}
	s, err := tooldefs.Build(many, &tooldefs.Config{CodeMode: "true", IndexMaxEntries: 5})
	require.NoError(t, err)
	desc := s.Definitions[0].Description
	require.Equal(t, 5, strings.Count(desc, "\n- toolq:pack:"))
	require.True(t, strings.HasSuffix(desc, "… and 95 more: find them with tools.search."), desc)

	s, err = tooldefs.Build(many, &tooldefs.Config{CodeMode: "true"})
	require.NoError(t, err)
	require.Equal(t, tooldefs.DefaultIndexMaxEntries, strings.Count(s.Definitions[0].Description, "\n- toolq:pack:"))
	s, err = tooldefs.Build(many, &tooldefs.Config{CodeMode: "true", IndexMaxEntries: 1000, IndexMaxBytes: 600})
	require.NoError(t, err)
	idx := s.Definitions[0].Description[strings.Index(s.Definitions[0].Description, "\nTools ("):]
	require.LessOrEqual(t, len(idx), 600+len("\n… and 100 more: find them with tools.search."))
	require.Contains(t, idx, "more: find them with tools.search.")
}

func TestNamesFitEveryProvider(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 60) + ".b" + strings.Repeat("c", 40)
	s, err := tooldefs.Build([]contracts.CatalogTool{
		{ID: "toolq:core:one", Tool: "a.b", Name: "x", Source: "toolq"},
		{ID: "toolq:core:two", Tool: "a_b", Name: "x", Source: "toolq"},
		{ID: "toolq:core:three", Tool: long, Name: "x", Source: "toolq"},
		{ID: "toolq:core:four", Tool: "9lives", Name: "x", Source: "toolq"},
	}, &tooldefs.Config{CodeMode: "false"})
	require.NoError(t, err)
	seen := map[string]string{}
	for _, d := range s.Definitions {
		require.LessOrEqual(t, len(d.Name), tooldefs.MaxNameBytes)
		require.Regexp(t, `^[A-Za-z_][A-Za-z0-9_-]*$`, d.Name)
		require.NotContains(t, seen, d.Name, "two tools, one name")
		seen[d.Name] = d.Tool
		got, ok := s.Lookup(d.Name)
		require.True(t, ok)
		require.Equal(t, d.Tool, got.Tool)
	}
	require.Equal(t, "a.b", seen["a_b"])
}

// TestExportPassesProviderRules gives each format of both surfaces to the
// local servers that check what each provider documents, and the MCP
// tools to the go-sdk.
func TestExportPassesProviderRules(t *testing.T) {
	t.Parallel()
	srv := tooldefstest.Start(t)
	for _, mode := range []string{"true", "false"} {
		s, err := tooldefs.Build(catalog(), &tooldefs.Config{CodeMode: mode, ShellExec: true})
		require.NoError(t, err)
		for _, format := range tooldefs.Formats {
			out, err := tooldefs.Format(s, format)
			require.NoError(t, err, format)
			if format == tooldefs.FormatMCP {
				require.NoError(t, tooldefstest.CheckMCP(t.Context(), out))
				continue
			}
			require.NoError(t, srv.Post(format, out), "code mode %s", mode)
		}
	}
	_, err := tooldefs.Format(&tooldefs.Surface{}, "cohere")
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
}

// TestProviderRulesRefuse shows that each server refuses what its provider
// documents as wrong, so a broken export fails the test above.
func TestProviderRulesRefuse(t *testing.T) {
	t.Parallel()
	srv := tooldefstest.Start(t)
	obj := `{"type":"object","properties":{"a":{"type":"string"}}}`
	for _, tc := range []struct{ format, tools string }{
		{"openai", `[{"type":"function","name":"code_mode.exec","parameters":` + obj + `,"strict":false}]`},
		{"openai", `[{"type":"function","name":"f","parameters":{"type":"string"},"strict":false}]`},
		{"openai", `[{"type":"function","name":"f","parameters":{"type":"object","anyOf":[{"required":["a"]}]},"strict":false}]`},
		{"openai", `[{"type":"function","name":"f","parameters":` + obj + `}]`}, // strict by default
		{"openai", `[{"type":"function","name":"f","parameters":` + obj + `,"strict":false},{"type":"function","name":"f","strict":false}]`},
		{"openai", `[{"type":"function","name":"f","parameters":{"type":"object","properties":{"a":{"$ref":"https://example.com/a.json"}}},"strict":false}]`},
		{"openai", `[{"type":"function","name":"f","input_schema":` + obj + `}]`},
		{"openai-chat", `[{"type":"function","function":{"name":"a b","parameters":` + obj + `}}]`},
		{"openai-chat", `[{"type":"function","function":{"name":"` + strings.Repeat("x", 65) + `"}}]`},
		{"anthropic", `[{"name":"f","description":"d"}]`},
		{"anthropic", `[{"name":"code_mode.exec","input_schema":` + obj + `}]`},
		{"anthropic", `[{"name":"f","input_schema":{"type":"array"}}]`},
		{"anthropic", `[{"name":"f","input_schema":{"type":"object","oneOf":[{"required":["a"]}]}}]`},
		{"anthropic", `[{"name":"f","input_schema":` + obj + `,"parameters":{}}]`},
		{"gemini", `[{"functionDeclarations":[{"name":"1f"}]}]`},
		{"gemini", `[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT","properties":{"a":{"$ref":"#/$defs/a"}}}}]}]`},
		{"gemini", `[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT","properties":{"a":{"type":"STRING"}},"additionalProperties":false}}]}]`},
		{"gemini", `[{"functionDeclarations":[{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"}}}}]}]`},
		{"gemini", `[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT","properties":{"env":{"type":"OBJECT"}}}}]}]`},
		{"gemini", `[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT","properties":{"a":{"type":"ARRAY"}}}}]}]`},
		{"gemini", `[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT","properties":{"a":{"type":"INTEGER","enum":[1,2]}}}}]}]`},
		{"gemini", `[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT","properties":{"a":{"type":"STRING"}},"required":["b"]}}]}]`},
		{"gemini", `[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT","properties":{"a":{"type":"NUMBER","exclusiveMinimum":0}}}}]}]`},
	} {
		require.Error(t, srv.Post(tc.format, json.RawMessage(tc.tools)), "%s %s", tc.format, tc.tools)
	}
	for _, bad := range []string{
		`[{"name":"a b","inputSchema":{"type":"object"}}]`,
		`[{"name":"f","inputSchema":{"type":"string"}}]`,
		`[{"name":"f","inputSchema":{"type":"object"},"outputSchema":{"type":"array"}}]`,
		`[{"name":"f","inputSchema":{"type":"object"}},{"name":"f","inputSchema":{"type":"object"}}]`,
	} {
		require.Error(t, tooldefstest.CheckMCP(t.Context(), json.RawMessage(bad)), bad)
	}
	// And the same servers take a good request.
	require.NoError(t, srv.Post("gemini", json.RawMessage(`[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT","properties":{"a":{"type":"STRING","nullable":true}},"required":["a"]}}]}]`)))
	require.NoError(t, srv.Post("openai", json.RawMessage(`[{"type":"function","name":"f","parameters":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}}]`)))
}

func TestGeminiSchema(t *testing.T) {
	t.Parallel()
	_, err := tooldefs.GeminiSchema(json.RawMessage(`{"$schema":"x","type":"object","additionalProperties":false,
		"properties":{"owner":{"$ref":"#/$defs/login"},"title":{"type":["string","null"]},"n":{"type":"number","exclusiveMinimum":0},
		"env":{"type":"object","additionalProperties":{"type":"string"}},"k":{"const":"x"},"tags":{"type":"array","items":{"type":"string","enum":["a","b"]}}},
		"required":["owner","env"],"$defs":{"login":{"type":"string","minLength":1}}}`))
	require.Error(t, err, "a required map cannot be described")
	got, err := tooldefs.GeminiSchema(json.RawMessage(`{"type":"object","additionalProperties":false,
		"properties":{"owner":{"$ref":"#/$defs/login"},"title":{"type":["string","null"]},"n":{"type":"number","exclusiveMinimum":0},
		"env":{"type":"object","additionalProperties":{"type":"string"}},"tags":{"type":"array","items":{"type":"string","enum":["a","b"]}}},
		"required":["owner"],"$defs":{"login":{"type":"string","minLength":1}}}`))
	require.NoError(t, err)
	b, err := json.Marshal(got)
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"OBJECT","properties":{
		"owner":{"type":"STRING","minLength":1},"title":{"type":"STRING","nullable":true},"n":{"type":"NUMBER"},
		"tags":{"type":"ARRAY","items":{"type":"STRING","enum":["a","b"]}}},
		"required":["owner"],"propertyOrdering":["n","owner","tags","title"]}`, string(b))
	_, err = tooldefs.GeminiSchema(json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"https://example.com/a.json"}},"required":["a"]}`))
	require.Error(t, err)
}
