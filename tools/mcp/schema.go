package mcp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolq/toolq/contracts"
)

// Bounds on the metadata a server sends. A remote server is not trusted:
// what it says about its tools ends up in every run's catalog, in guest
// declarations and in schemas the workers compile.
const (
	maxToolsPerServer = 256
	maxDescription    = 2048
	maxLabel          = 128
	maxSchemaBytes    = 64 << 10
	maxSchemaDepth    = 32
)

// toolToken turns an MCP tool name into an id token of at most max bytes: a
// valid name stays as it is; any other gets its invalid characters replaced
// by '_' and a short hash of the original, so two names never meet.
func toolToken(name string, max int) string {
	if contracts.ValidID(name) && len(name) <= max {
		return name
	}
	var b strings.Builder
	for _, r := range name {
		if r < utf8.RuneSelf && contracts.ValidID(string(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-" + hex.EncodeToString(sum[:4])
	s := b.String()
	if len(s) > max-len(suffix) {
		s = s[:max-len(suffix)]
	}
	return s + suffix
}

// clean makes remote text safe to show: valid UTF-8, at most max bytes,
// and (when oneLine) without line breaks.
func clean(s string, max int, oneLine bool) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if oneLine {
		s = strings.Join(strings.Fields(s), " ")
	}
	s = strings.TrimSpace(s)
	if len(s) <= max {
		return s
	}
	cut := max - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// schemaJSON marshals a schema the SDK decoded and checks it: an object, at
// most maxSchemaBytes, nested at most maxSchemaDepth deep.
func schemaJSON(v any) (json.RawMessage, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	if len(raw) > maxSchemaBytes {
		return nil, fmt.Errorf("schema is %d bytes, more than %d", len(raw), maxSchemaBytes)
	}
	if depth(raw) > maxSchemaDepth {
		return nil, fmt.Errorf("schema is nested more than %d deep", maxSchemaDepth)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, errors.New("schema is not a JSON object")
	}
	return raw, nil
}

// depth is the deepest nesting of objects and arrays in valid JSON.
func depth(raw []byte) int {
	d, deepest, inString, escaped := 0, 0, false, false
	for _, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			d++
			deepest = max(deepest, d)
		case c == '}' || c == ']':
			d--
		}
	}
	return deepest
}

// compile compiles a remote schema with no loader at all: a schema that
// refers to anything outside itself (a file, a URL, an unknown
// meta-schema) does not compile, so neither this package nor a worker that
// compiles it later ever fetches anything because a server said so.
func compile(schema json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("https://toolq.invalid/mcp/schema.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("https://toolq.invalid/mcp/schema.json")
}

// resultSchema is the output schema of an MCP tool on the bus: the
// McpToolResult {content, structuredContent, isError} that Handle returns,
// with the tool's own output schema as structuredContent. That schema gets
// an $id of its own (when it has none), so that its "#/…" references still
// point into it once it is embedded.
func resultSchema(output json.RawMessage) (json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(output, &obj); err != nil {
		return nil, err
	}
	if _, ok := obj["$id"]; !ok {
		obj["$id"] = json.RawMessage(`"https://toolq.invalid/mcp/structured.json"`)
	}
	embedded, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(`{"type":"object","properties":{` +
		`"content":{"type":"array","items":{"type":"object"}},` +
		`"structuredContent":` + string(embedded) + `,` +
		`"isError":{"type":"boolean"}},"required":["content"]}`), nil
}
