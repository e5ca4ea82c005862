package tooldefs

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/toolq/toolq/contracts"
)

// Formats of Format.
const (
	// FormatOpenAI is the tools array of an OpenAI Responses request:
	// {type: "function", name, description, parameters, strict: false}.
	FormatOpenAI = "openai"
	// FormatOpenAIChat is the tools array of an OpenAI Chat Completions
	// request: {type: "function", function: {name, description, parameters}}.
	FormatOpenAIChat = "openai-chat"
	// FormatAnthropic is the tools array of an Anthropic Messages request:
	// {name, description, input_schema}.
	FormatAnthropic = "anthropic"
	// FormatGemini is the tools array of a Gemini generateContent request:
	// [{functionDeclarations: [{name, description, parameters}]}], the
	// parameters in Gemini's OpenAPI subset.
	FormatGemini = "gemini"
	// FormatMCP is the tools array of an MCP tools/list result: {name,
	// description, inputSchema, outputSchema, _meta: {"toolq/tool"}}.
	FormatMCP = "mcp"
)

// Formats lists the formats Format knows.
var Formats = []string{FormatOpenAI, FormatOpenAIChat, FormatAnthropic, FormatGemini, FormatMCP}

// MetaTool is the key of the bus tool in an MCP tool's _meta.
const MetaTool = "toolq/tool"

// Format renders the surface as format's tools array (indented JSON). An
// unknown format is invalid_input.
func Format(s *Surface, format string) ([]byte, error) {
	var out any
	switch format {
	case FormatOpenAI:
		tools := make([]map[string]any, 0, len(s.Definitions))
		for _, d := range s.Definitions {
			// strict is said: the Responses API takes an absent strict as
			// true, which would need every property required.
			tools = append(tools, map[string]any{
				"type": "function", "name": d.Name, "description": d.Description,
				"parameters": d.InputSchema, "strict": false,
			})
		}
		out = tools
	case FormatOpenAIChat:
		tools := make([]map[string]any, 0, len(s.Definitions))
		for _, d := range s.Definitions {
			tools = append(tools, map[string]any{"type": "function", "function": map[string]any{
				"name": d.Name, "description": d.Description, "parameters": d.InputSchema,
			}})
		}
		out = tools
	case FormatAnthropic:
		tools := make([]map[string]any, 0, len(s.Definitions))
		for _, d := range s.Definitions {
			tools = append(tools, map[string]any{"name": d.Name, "description": d.Description, "input_schema": d.InputSchema})
		}
		out = tools
	case FormatGemini:
		decls := make([]map[string]any, 0, len(s.Definitions))
		for _, d := range s.Definitions {
			decl := map[string]any{"name": d.Name, "description": d.Description}
			params, err := GeminiSchema(d.InputSchema)
			if err != nil {
				return nil, fmt.Errorf("tooldefs: %s for gemini: %w", d.Name, err)
			}
			if props, _ := params["properties"].(map[string]any); len(props) > 0 {
				decl["parameters"] = params // a function without parameters leaves them out
			}
			decls = append(decls, decl)
		}
		out = []map[string]any{{"functionDeclarations": decls}}
	case FormatMCP:
		tools := make([]map[string]any, 0, len(s.Definitions))
		for _, d := range s.Definitions {
			t := map[string]any{
				"name": d.Name, "description": d.Description, "inputSchema": d.InputSchema,
				"_meta": map[string]any{MetaTool: d.Tool},
			}
			if len(d.OutputSchema) > 0 {
				t["outputSchema"] = d.OutputSchema
			}
			tools = append(tools, t)
		}
		out = tools
	default:
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "format %q: want one of %s", format, strings.Join(Formats, ", "))
	}
	return json.MarshalIndent(out, "", "  ")
}

// geminiKeep are the JSON Schema keywords Gemini's Schema object has, with
// the same meaning.
var geminiKeep = []string{
	"description", "title", "format", "minItems", "maxItems", "minLength", "maxLength",
	"minimum", "maximum", "minProperties", "maxProperties", "pattern", "default", "example",
}

// geminiTypes maps JSON Schema types to Gemini's Type enum.
var geminiTypes = map[string]string{
	"string": "STRING", "number": "NUMBER", "integer": "INTEGER", "boolean": "BOOLEAN",
	"array": "ARRAY", "object": "OBJECT",
}

// GeminiSchema converts a JSON Schema to Gemini's OpenAPI subset: types in
// upper case, a ["T", "null"] type as T with nullable, enums of strings
// only, oneOf as anyOf, local $refs to $defs inlined; $schema, $id,
// additionalProperties, const, exclusive bounds and the other keywords
// Gemini does not know are dropped. An object property that ends up
// without properties of its own (a map) is left out when optional; a
// required one is an error, as is an array without items.
func GeminiSchema(schema json.RawMessage) (map[string]any, error) {
	var root map[string]any
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	return geminiNode(root, root, 0)
}

func geminiNode(root, s map[string]any, depth int) (map[string]any, error) {
	if depth > 16 {
		return nil, fmt.Errorf("schema nests deeper than 16 levels")
	}
	if ref, ok := s["$ref"].(string); ok {
		name, local := strings.CutPrefix(ref, "#/$defs/")
		defs, _ := root["$defs"].(map[string]any)
		target, found := defs[name].(map[string]any)
		if !local || !found {
			return nil, fmt.Errorf("$ref %q: only local #/$defs references can be inlined", ref)
		}
		return geminiNode(root, target, depth+1)
	}
	out := map[string]any{}
	for _, k := range geminiKeep {
		if v, ok := s[k]; ok {
			out[k] = v
		}
	}
	typ, nullable, err := geminiType(s["type"])
	if err != nil {
		return nil, err
	}
	if nullable {
		out["nullable"] = true
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		alts, ok := s[k].([]any)
		if !ok {
			continue
		}
		var conv []any
		for _, a := range alts {
			am, _ := a.(map[string]any)
			if t, _ := am["type"].(string); t == "null" {
				out["nullable"] = true
				continue
			}
			c, err := geminiNode(root, am, depth+1)
			if err != nil {
				return nil, err
			}
			conv = append(conv, c)
		}
		if len(conv) == 1 && typ == "" {
			for k, v := range conv[0].(map[string]any) {
				out[k] = v
			}
		} else if len(conv) > 0 {
			out["anyOf"] = conv
		}
	}
	if typ == "" {
		if _, ok := out["anyOf"]; ok {
			return out, nil
		}
		if t, ok := out["type"].(string); ok {
			typ = t
		} else if _, ok := s["properties"]; ok {
			typ = "OBJECT"
		} else if e, ok := s["enum"]; ok && allStrings(e) {
			typ = "STRING"
		} else {
			return nil, fmt.Errorf("a schema without a type Gemini can take")
		}
	}
	out["type"] = typ
	if e, ok := s["enum"].([]any); ok {
		if typ != "STRING" || !allStrings(e) {
			return nil, fmt.Errorf("an enum of other than strings")
		}
		out["enum"] = e
	}
	switch typ {
	case "ARRAY":
		items, ok := s["items"].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("an array without items")
		}
		c, err := geminiNode(root, items, depth+1)
		if err != nil {
			return nil, err
		}
		out["items"] = c
	case "OBJECT":
		props, _ := s["properties"].(map[string]any)
		required := map[string]bool{}
		if r, ok := s["required"].([]any); ok {
			for _, v := range r {
				if n, ok := v.(string); ok {
					required[n] = true
				}
			}
		}
		conv := map[string]any{}
		names := make([]string, 0, len(props))
		for n := range props {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			p, _ := props[n].(map[string]any)
			c, err := geminiNode(root, p, depth+1)
			if err == nil && c["type"] == "OBJECT" {
				if cp, _ := c["properties"].(map[string]any); len(cp) == 0 {
					err = fmt.Errorf("an object without properties (Gemini has no maps)")
				}
			}
			if err != nil {
				if required[n] {
					return nil, fmt.Errorf("property %s: %w", n, err)
				}
				continue // an optional property Gemini cannot describe
			}
			conv[n] = c
		}
		if len(conv) > 0 {
			out["properties"] = conv
			var req []string
			for _, n := range names {
				if _, ok := conv[n]; ok && required[n] {
					req = append(req, n)
				}
			}
			if len(req) > 0 {
				out["required"] = req
			}
			out["propertyOrdering"] = slices.Sorted(maps.Keys(conv))
		}
	}
	return out, nil
}

// geminiType maps a JSON Schema type ("string", or ["string", "null"]) to
// Gemini's and whether null is allowed too.
func geminiType(t any) (typ string, nullable bool, err error) {
	var names []string
	switch v := t.(type) {
	case nil:
		return "", false, nil
	case string:
		names = []string{v}
	case []any:
		for _, x := range v {
			n, _ := x.(string)
			names = append(names, n)
		}
	default:
		return "", false, fmt.Errorf("type %v", t)
	}
	for _, n := range names {
		if n == "null" {
			nullable = true
			continue
		}
		g, ok := geminiTypes[n]
		if !ok {
			return "", false, fmt.Errorf("type %q", n)
		}
		if typ != "" && typ != g {
			return "", false, fmt.Errorf("a union of types %v", names)
		}
		typ = g
	}
	return typ, nullable, nil
}

func allStrings(v any) bool {
	vs, ok := v.([]any)
	if !ok {
		return false
	}
	for _, x := range vs {
		if _, ok := x.(string); !ok {
			return false
		}
	}
	return true
}
