package mcp

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

func TestToolToken(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 100)
	for _, c := range []struct{ name, want string }{
		{"create_issue", "create_issue"},
		{"take-snapshot", "take-snapshot"},
		{"weird.name/v2", "weird_name_v2-"},
		{"héllo", "h_llo-"},
		{long, strings.Repeat("a", 80-9) + "-"},
	} {
		got := toolToken(c.name, 80)
		require.True(t, strings.HasPrefix(got, c.want), "%q → %q", c.name, got)
		require.True(t, contracts.ValidID(got), got)
		require.LessOrEqual(t, len(got), 80)
	}
	require.NotEqual(t, toolToken("a.b", 80), toolToken("a/b", 80), "names that sanitize alike stay apart")
}

func TestClean(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in      string
		max     int
		oneLine bool
		want    string
	}{
		{"  plain  ", 20, false, "plain"},
		{"two\nlines", 20, false, "two\nlines"},
		{"two\n lines\t here", 20, true, "two lines here"},
		{"abcdefghij", 8, false, "abcde…"},
		{"ééééé", 6, false, "é…"},
		{"bad \xff byte", 20, false, "bad \uFFFD byte"},
	} {
		got := clean(c.in, c.max, c.oneLine)
		require.Equal(t, c.want, got, c.in)
		require.LessOrEqual(t, len(got), c.max)
	}
}

func TestSchemaChecks(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"a":`, maxSchemaDepth+1) + "1" + strings.Repeat("}", maxSchemaDepth+1)
	for name, c := range map[string]struct {
		schema any
		ok     bool
	}{
		"object":      {map[string]any{"type": "object"}, true},
		"raw":         {json.RawMessage(`{"type":"object","properties":{"s":{"type":"string","pattern":"[\"{"}}}`), true},
		"array":       {[]any{1}, false},
		"string":      {"x", false},
		"null":        {nil, false},
		"too big":     {map[string]any{"description": strings.Repeat("x", maxSchemaBytes)}, false},
		"too deep":    {json.RawMessage(deep), false},
		"nearly deep": {json.RawMessage(strings.Repeat(`{"a":`, maxSchemaDepth) + "1" + strings.Repeat("}", maxSchemaDepth)), true},
	} {
		_, err := schemaJSON(c.schema)
		require.Equal(t, c.ok, err == nil, "%s: %v", name, err)
	}
	for name, c := range map[string]struct {
		schema string
		ok     bool
	}{
		"plain":          {`{"type":"object","properties":{"a":{"type":"integer"}}}`, true},
		"local ref":      {`{"$defs":{"n":{"type":"number"}},"properties":{"a":{"$ref":"#/$defs/n"}}}`, true},
		"file ref":       {`{"properties":{"a":{"$ref":"file:///etc/passwd"}}}`, false},
		"relative ref":   {`{"properties":{"a":{"$ref":"other.json"}}}`, false},
		"http ref":       {`{"properties":{"a":{"$ref":"http://127.0.0.1:1/x.json"}}}`, false},
		"unknown meta":   {`{"$schema":"http://127.0.0.1:1/meta","type":"object"}`, false},
		"known meta":     {`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`, true},
		"bad keyword":    {`{"type":12}`, false},
		"own id and ref": {`{"$id":"https://example.com/s","$defs":{"n":{"type":"number"}},"properties":{"a":{"$ref":"https://example.com/s#/$defs/n"}}}`, true},
	} {
		_, err := compile(json.RawMessage(c.schema))
		require.Equal(t, c.ok, err == nil, "%s: %v", name, err)
	}
}

// FuzzNewTool feeds arbitrary server metadata to newTool: it must never
// panic, and what it accepts must be a valid tool and catalog entry.
func FuzzNewTool(f *testing.F) {
	f.Add("echo", "Echo.", "Echo", `{"type":"object","properties":{"text":{"type":"string"}}}`, `{"type":"object","properties":{"n":{"type":"number"}}}`)
	f.Add("a.b/c", "x\n*/ y", "", `{"type":"object"}`, ``)
	f.Add("", "", "", `{}`, `[]`)
	f.Add("x", "", "", `{"$ref":"file:///etc/passwd"}`, `null`)
	srv := newServer("srv", ServerConfig{Command: "unused"}, &Config{Logger: slog.New(slog.DiscardHandler)})
	f.Fuzz(func(t *testing.T, name, desc, title, in, out string) {
		tool := &sdk.Tool{Name: name, Description: desc, Title: title}
		if json.Valid([]byte(in)) {
			tool.InputSchema = json.RawMessage(in)
		}
		if json.Valid([]byte(out)) {
			tool.OutputSchema = json.RawMessage(out)
		}
		got, err := srv.newTool(tool)
		if err != nil {
			return
		}
		require.True(t, contracts.ValidTool(got.Name), got.Name)
		require.Equal(t, got.Name, got.Catalog.Tool)
		require.NoError(t, got.Catalog.Validate())
		require.LessOrEqual(t, len(got.Catalog.Description), maxDescription)
		require.LessOrEqual(t, len(got.Catalog.Label), maxLabel)
		require.NotContains(t, got.Catalog.Label, "\n")
	})
}
