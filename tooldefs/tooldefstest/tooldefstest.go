// Package tooldefstest has local HTTP servers that take a request's tools
// the way OpenAI (Responses and Chat Completions), Anthropic Messages and
// Gemini generateContent document their rules, and a check of MCP tools
// with the MCP go-sdk, so tests can tell whether exported definitions would
// be accepted. Only tests may import it.
//
// The rules checked, as each provider documents them:
//   - OpenAI: a function's name matches ^[a-zA-Z0-9_-]{1,64}$ and is
//     unique; parameters is a JSON Schema with "type": "object" and no
//     oneOf, anyOf, allOf, enum or not at its top; at most 128 tools; with
//     strict (the Responses API's default when strict is absent) every
//     object has additionalProperties false and requires all its
//     properties. Unknown fields of a tool are refused.
//   - Anthropic: name matches ^[a-zA-Z0-9_-]{1,64}$ and is unique;
//     input_schema is required, a JSON Schema with "type": "object" and no
//     oneOf, anyOf or allOf at its top; unknown fields are refused.
//   - Gemini: a declaration's name starts with a letter or an underscore,
//     then letters, digits, underscores or dashes, at most 64 in all;
//     parameters, when given, is a Schema of the OpenAPI subset: only its
//     fields (type, format, title, description, nullable, enum, items,
//     properties, required, propertyOrdering, anyOf, min/max bounds,
//     pattern, default, example), type one of STRING, NUMBER, INTEGER,
//     BOOLEAN, ARRAY, OBJECT, OBJECT at the top; an OBJECT has properties
//     (named like identifiers), required names only them, an ARRAY has
//     items, enum only on STRING. No $ref, no additionalProperties.
//   - MCP: the go-sdk server takes each tool (a name of 1 to 128 of
//     [A-Za-z0-9_.-], input and output schemas of type object) and its
//     client lists them back.
//
// Every schema must also compile as JSON Schema 2020-12 without loading
// anything.
package tooldefstest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Paths of the servers' endpoints.
const (
	PathOpenAIResponses = "/openai/v1/responses"
	PathOpenAIChat      = "/openai/v1/chat/completions"
	PathAnthropic       = "/anthropic/v1/messages"
	PathGemini          = "/gemini/v1beta/models/gemini-test:generateContent"
)

// Server is one HTTP server with an endpoint per provider.
type Server struct {
	*httptest.Server
}

// Start starts the servers; the test's cleanup closes them.
func Start(tb testing.TB) *Server {
	tb.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathOpenAIResponses, handler(openAIError, func(b map[string]json.RawMessage) error {
		return checkOpenAI(b["tools"], true)
	}))
	mux.HandleFunc("POST "+PathOpenAIChat, handler(openAIError, func(b map[string]json.RawMessage) error {
		return checkOpenAI(b["tools"], false)
	}))
	mux.HandleFunc("POST "+PathAnthropic, handler(anthropicError, func(b map[string]json.RawMessage) error {
		return checkAnthropic(b["tools"])
	}))
	mux.HandleFunc("POST "+PathGemini, handler(geminiError, func(b map[string]json.RawMessage) error {
		return checkGemini(b["tools"])
	}))
	s := &Server{httptest.NewServer(mux)}
	tb.Cleanup(s.Close)
	return s
}

// Request returns the path and a minimal request body of format (openai,
// openai-chat, anthropic, gemini) carrying tools as its tools array.
func Request(format string, tools json.RawMessage) (path string, body []byte, err error) {
	var req map[string]any
	switch format {
	case "openai":
		path, req = PathOpenAIResponses, map[string]any{"model": "gpt-test", "input": "hi"}
	case "openai-chat":
		path, req = PathOpenAIChat, map[string]any{"model": "gpt-test", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}
	case "anthropic":
		path, req = PathAnthropic, map[string]any{"model": "claude-test", "max_tokens": 16, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}
	case "gemini":
		path, req = PathGemini, map[string]any{"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": "hi"}}}}}
	default:
		return "", nil, fmt.Errorf("no server for format %q", format)
	}
	req["tools"] = tools
	body, err = json.Marshal(req)
	return path, body, err
}

// Post sends tools to the endpoint of format and returns the provider's
// message when it refuses them.
func (s *Server) Post(format string, tools json.RawMessage) error {
	path, body, err := Request(format, tools)
	if err != nil {
		return err
	}
	resp, err := s.Client().Post(s.URL+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d %s", format, resp.StatusCode, msg)
	}
	return nil
}

func handler(fail func(http.ResponseWriter, string), check func(map[string]json.RawMessage) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body map[string]json.RawMessage
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<20)).Decode(&body); err != nil {
			fail(w, "could not parse the JSON body of your request: "+err.Error())
			return
		}
		if err := check(body); err != nil {
			fail(w, err.Error())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}
}

func openAIError(w http.ResponseWriter, msg string) {
	writeJSON(w, map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error"}})
}

func anthropicError(w http.ResponseWriter, msg string) {
	writeJSON(w, map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": msg}})
}

func geminiError(w http.ResponseWriter, msg string) {
	writeJSON(w, map[string]any{"error": map[string]any{"code": 400, "message": msg, "status": "INVALID_ARGUMENT"}})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(v)
}

var (
	openAIName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	geminiName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)
	geminiProp = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	mcpName    = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)
)

// decodeStrict decodes data into v, refusing fields v does not have.
func decodeStrict(data json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func checkOpenAI(raw json.RawMessage, responses bool) error {
	var tools []json.RawMessage
	if err := json.Unmarshal(raw, &tools); err != nil {
		return fmt.Errorf("tools: %w", err)
	}
	if len(tools) > 128 {
		return fmt.Errorf("tools: array too long, expected at most 128, got %d", len(tools))
	}
	type fn struct {
		Type        string          `json:"type,omitempty"`
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
		Strict      *bool           `json:"strict,omitempty"`
	}
	seen := map[string]bool{}
	for i, t := range tools {
		var f fn
		if responses {
			if err := decodeStrict(t, &f); err != nil {
				return fmt.Errorf("tools[%d]: %w", i, err)
			}
		} else {
			var chat struct {
				Type     string `json:"type"`
				Function fn     `json:"function"`
			}
			if err := decodeStrict(t, &chat); err != nil {
				return fmt.Errorf("tools[%d]: %w", i, err)
			}
			f = chat.Function
			f.Type = chat.Type
		}
		if f.Type != "function" {
			return fmt.Errorf("tools[%d].type: %q is not supported here", i, f.Type)
		}
		if !openAIName.MatchString(f.Name) {
			return fmt.Errorf("tools[%d].name: %q does not match '^[a-zA-Z0-9_-]{1,64}$'", i, f.Name)
		}
		if seen[f.Name] {
			return fmt.Errorf("tools: duplicate function name %q", f.Name)
		}
		seen[f.Name] = true
		if len(f.Parameters) == 0 {
			continue // a function without parameters
		}
		top, err := objectTop(f.Parameters, "oneOf", "anyOf", "allOf", "enum", "not")
		if err != nil {
			return fmt.Errorf("invalid schema for function '%s': %w", f.Name, err)
		}
		strict := f.Strict != nil && *f.Strict || responses && f.Strict == nil
		if strict {
			if err := strictSchema(top); err != nil {
				return fmt.Errorf("invalid schema for function '%s': in strict mode, %w", f.Name, err)
			}
		}
	}
	return nil
}

func checkAnthropic(raw json.RawMessage) error {
	var tools []json.RawMessage
	if err := json.Unmarshal(raw, &tools); err != nil {
		return fmt.Errorf("tools: %w", err)
	}
	seen := map[string]bool{}
	for i, t := range tools {
		var tool struct {
			Type         string          `json:"type,omitempty"`
			Name         string          `json:"name"`
			Description  string          `json:"description,omitempty"`
			InputSchema  json.RawMessage `json:"input_schema"`
			CacheControl json.RawMessage `json:"cache_control,omitempty"`
		}
		if err := decodeStrict(t, &tool); err != nil {
			return fmt.Errorf("tools.%d: Extra inputs are not permitted: %w", i, err)
		}
		if tool.Type != "" && tool.Type != "custom" {
			return fmt.Errorf("tools.%d.type: %q", i, tool.Type)
		}
		if !openAIName.MatchString(tool.Name) {
			return fmt.Errorf("tools.%d.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'", i)
		}
		if seen[tool.Name] {
			return fmt.Errorf("tools: Tool names must be unique")
		}
		seen[tool.Name] = true
		if len(tool.InputSchema) == 0 {
			return fmt.Errorf("tools.%d.custom.input_schema: Field required", i)
		}
		if _, err := objectTop(tool.InputSchema, "oneOf", "anyOf", "allOf"); err != nil {
			return fmt.Errorf("tools.%d.custom.input_schema: %w", i, err)
		}
	}
	return nil
}

func checkGemini(raw json.RawMessage) error {
	var tools []struct {
		FunctionDeclarations []json.RawMessage `json:"functionDeclarations"`
	}
	if err := decodeStrict(raw, &tools); err != nil {
		return fmt.Errorf("invalid JSON payload received. tools: %w", err)
	}
	seen := map[string]bool{}
	for i, t := range tools {
		for j, d := range t.FunctionDeclarations {
			var decl struct {
				Name        string         `json:"name"`
				Description string         `json:"description,omitempty"`
				Parameters  map[string]any `json:"parameters,omitempty"`
				Response    map[string]any `json:"response,omitempty"`
			}
			where := fmt.Sprintf("tools[%d].function_declarations[%d]", i, j)
			if err := decodeStrict(d, &decl); err != nil {
				return fmt.Errorf("invalid JSON payload received. %s: %w", where, err)
			}
			if !geminiName.MatchString(decl.Name) {
				return fmt.Errorf("%s.name: invalid function name: must start with a letter or an underscore and be alphameric (a-z, A-Z, 0-9), underscores (_) or dashes (-), with a maximum length of 64", where)
			}
			if seen[decl.Name] {
				return fmt.Errorf("%s.name: duplicate function name %q", where, decl.Name)
			}
			seen[decl.Name] = true
			if decl.Parameters == nil {
				continue
			}
			if decl.Parameters["type"] != "OBJECT" {
				return fmt.Errorf("%s.parameters.type: must be OBJECT", where)
			}
			if err := geminiSchema(where+".parameters", decl.Parameters); err != nil {
				return err
			}
		}
	}
	return nil
}

var geminiFields = []string{
	"type", "format", "title", "description", "nullable", "enum", "items", "properties", "required",
	"propertyOrdering", "anyOf", "minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum",
	"minProperties", "maxProperties", "pattern", "default", "example",
}

var geminiTypes = []string{"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT"}

func geminiSchema(where string, s map[string]any) error {
	for k := range s {
		if !slices.Contains(geminiFields, k) {
			return fmt.Errorf("invalid JSON payload received: unknown name %q at '%s': cannot find field", k, where)
		}
	}
	if alts, ok := s["anyOf"].([]any); ok {
		for i, a := range alts {
			am, ok := a.(map[string]any)
			if !ok {
				return fmt.Errorf("%s.anyOf[%d]: not a schema", where, i)
			}
			if err := geminiSchema(fmt.Sprintf("%s.anyOf[%d]", where, i), am); err != nil {
				return err
			}
		}
		if _, typed := s["type"]; !typed {
			return nil
		}
	}
	typ, _ := s["type"].(string)
	if !slices.Contains(geminiTypes, typ) {
		return fmt.Errorf("%s.type: invalid value %v, want one of %s", where, s["type"], strings.Join(geminiTypes, ", "))
	}
	if e, ok := s["enum"]; ok {
		vs, isList := e.([]any)
		if typ != "STRING" || !isList {
			return fmt.Errorf("%s.enum: only allowed for STRING type", where)
		}
		for _, v := range vs {
			if _, ok := v.(string); !ok {
				return fmt.Errorf("%s.enum: values must be strings", where)
			}
		}
	}
	switch typ {
	case "ARRAY":
		items, ok := s["items"].(map[string]any)
		if !ok {
			return fmt.Errorf("%s.items: missing field", where)
		}
		return geminiSchema(where+".items", items)
	case "OBJECT":
		props, _ := s["properties"].(map[string]any)
		if len(props) == 0 {
			return fmt.Errorf("%s.properties: should be non-empty for OBJECT type", where)
		}
		for n, p := range props {
			if !geminiProp.MatchString(n) {
				return fmt.Errorf("%s.properties: invalid property name %q", where, n)
			}
			pm, ok := p.(map[string]any)
			if !ok {
				return fmt.Errorf("%s.properties[%s]: not a schema", where, n)
			}
			if err := geminiSchema(where+".properties["+n+"]", pm); err != nil {
				return err
			}
		}
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				n, _ := r.(string)
				if _, ok := props[n]; !ok {
					return fmt.Errorf("%s.required[%s]: property is not defined", where, n)
				}
			}
		}
	}
	return nil
}

// objectTop checks that schema compiles, has "type": "object" at its top
// and none of the keywords refused there, and returns it decoded.
func objectTop(schema json.RawMessage, refused ...string) (map[string]any, error) {
	if err := Compile(schema); err != nil {
		return nil, err
	}
	var top map[string]any
	if err := json.Unmarshal(schema, &top); err != nil {
		return nil, fmt.Errorf("schema must be a JSON object: %w", err)
	}
	if top["type"] != "object" {
		return nil, fmt.Errorf("schema must be a JSON Schema of 'type: \"object\"', got 'type: \"%v\"'", top["type"])
	}
	for _, k := range refused {
		if _, ok := top[k]; ok {
			return nil, fmt.Errorf("schema must have type 'object' and not have '%s' at the top level", k)
		}
	}
	return top, nil
}

// strictSchema checks OpenAI's strict mode rules on every object.
func strictSchema(s map[string]any) error {
	if s["type"] == "object" {
		if s["additionalProperties"] != false {
			return fmt.Errorf("'additionalProperties' is required to be supplied and to be false")
		}
		props, _ := s["properties"].(map[string]any)
		req, _ := s["required"].([]any)
		for n := range props {
			if !slices.Contains(req, any(n)) {
				return fmt.Errorf("'required' is required to include every key in properties, missing %q", n)
			}
		}
	}
	for _, k := range []string{"properties", "$defs"} {
		if m, ok := s[k].(map[string]any); ok {
			for _, v := range m {
				if vm, ok := v.(map[string]any); ok {
					if err := strictSchema(vm); err != nil {
						return err
					}
				}
			}
		}
	}
	if items, ok := s["items"].(map[string]any); ok {
		return strictSchema(items)
	}
	return nil
}

// Compile compiles schema as JSON Schema 2020-12 with no loader: a
// reference to anything outside it does not compile.
func Compile(schema json.RawMessage) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return fmt.Errorf("schema is not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	c.DefaultDraft(jsonschema.Draft2020)
	const url = "https://toolq.invalid/tooldefstest/schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	if _, err := c.Compile(url); err != nil {
		return fmt.Errorf("schema does not compile: %w", err)
	}
	return nil
}

// CheckMCPNames checks the names and schemas of an MCP tools array
// (tooldefs' mcp format) by the MCP spec's rules; the go-sdk check is in
// CheckMCP.
func CheckMCPNames(raw json.RawMessage) error {
	var tools []struct {
		Name         string          `json:"name"`
		InputSchema  json.RawMessage `json:"inputSchema"`
		OutputSchema json.RawMessage `json:"outputSchema"`
	}
	if err := json.Unmarshal(raw, &tools); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, t := range tools {
		if !mcpName.MatchString(t.Name) || seen[t.Name] {
			return fmt.Errorf("tools[%d]: name %q is not a unique MCP tool name", i, t.Name)
		}
		seen[t.Name] = true
		if _, err := objectTop(t.InputSchema); err != nil {
			return fmt.Errorf("tools[%d].inputSchema: %w", i, err)
		}
		if len(t.OutputSchema) > 0 {
			if _, err := objectTop(t.OutputSchema); err != nil {
				return fmt.Errorf("tools[%d].outputSchema: %w", i, err)
			}
		}
	}
	return nil
}
