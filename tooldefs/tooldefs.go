package tooldefs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/toolq/toolq/contracts"
)

// Values of Config.CodeMode, the code-mode contract's tools.codeMode.enabled.
const (
	CodeModeAuto = "auto"
	CodeModeOn   = "true"
	CodeModeOff  = "false"
)

// Defaults of the quick index's bounds.
const (
	DefaultIndexMaxEntries = 32
	DefaultIndexMaxBytes   = 4096
)

// MaxNameBytes is the longest model-facing name: what OpenAI, Anthropic and
// Gemini all accept.
const MaxNameBytes = 64

// MaxDescriptionBytes bounds the description of a catalog tool given to a
// model (an MCP server's description is remote metadata).
const MaxDescriptionBytes = 2048

// Config says which surface to build. The zero value is usable: code mode
// "auto" for no model, so off.
type Config struct {
	// CodeMode is CodeModeAuto (the default), CodeModeOn or CodeModeOff.
	CodeMode string
	// Model is the model the definitions are for; with CodeModeAuto, code
	// mode is engaged when it is one of PreferredModels.
	Model string
	// PreferredModels are the models that prefer code mode (the
	// code-mode contract's compat.codeMode "preferred"): exact names, or
	// prefixes ending in "*".
	PreferredModels []string
	// ShellExec says the workers let code-mode runs call the shell exec tool
	// (worker --codemode-exec); only then is it in the quick index.
	ShellExec bool
	// IndexMaxEntries and IndexMaxBytes bound the quick index in the
	// description of code_mode.exec; DefaultIndexMaxEntries and
	// DefaultIndexMaxBytes when zero.
	IndexMaxEntries int
	IndexMaxBytes   int
}

func (c *Config) withDefaults() (Config, error) {
	var o Config
	if c != nil {
		o = *c
	}
	switch o.CodeMode {
	case "":
		o.CodeMode = CodeModeAuto
	case CodeModeAuto, CodeModeOn, CodeModeOff:
	default:
		return o, contracts.Errorf(contracts.CodeInvalidInput, "code mode %q: want auto, true or false", o.CodeMode)
	}
	if o.IndexMaxEntries < 0 || o.IndexMaxBytes < 0 {
		return o, contracts.Errorf(contracts.CodeInvalidInput, "the quick index's bounds must not be negative")
	}
	if o.IndexMaxEntries == 0 {
		o.IndexMaxEntries = DefaultIndexMaxEntries
	}
	if o.IndexMaxBytes == 0 {
		o.IndexMaxBytes = DefaultIndexMaxBytes
	}
	return o, nil
}

// engaged reports whether code mode owns the model's tool surface.
func (c *Config) engaged() bool {
	switch c.CodeMode {
	case CodeModeOn:
		return true
	case CodeModeOff:
		return false
	}
	if c.Model == "" {
		return false
	}
	for _, p := range c.PreferredModels {
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(c.Model, prefix) || p == c.Model {
			return true
		}
	}
	return false
}

// Definition is one tool as a model is given it.
type Definition struct {
	// Name is the model-facing name ([A-Za-z0-9_-], a letter or
	// underscore first, at most MaxNameBytes).
	Name string `json:"name"`
	// Tool is the bus tool a call of it runs (<prefix>.jobs.<tool>).
	Tool string `json:"tool"`
	// CatalogID is the catalog entry it was made from; empty for code
	// mode's own tools.
	CatalogID   string `json:"catalogId,omitempty"`
	Description string `json:"description"`
	// InputSchema is a JSON Schema with "type": "object" at its top.
	InputSchema json.RawMessage `json:"inputSchema"`
	// OutputSchema, when set, is a JSON Schema with "type": "object" at
	// its top, which every completed result passes.
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
}

// Surface is the set of tools a model is given.
type Surface struct {
	// CodeMode says code mode owns the surface (code_mode.exec and
	// code_mode.wait are in it).
	CodeMode    bool         `json:"codeMode"`
	Definitions []Definition `json:"definitions"`
	// Skipped lists the catalog tools left out, with why.
	Skipped []string `json:"skipped,omitempty"`
}

// Lookup returns the definition of a model-facing name.
func (s *Surface) Lookup(name string) (Definition, bool) {
	for _, d := range s.Definitions {
		if d.Name == name {
			return d, true
		}
	}
	return Definition{}, false
}

// Build makes the surface of catalog (the entries of the toolq_catalog
// bucket, in any order; an entry that fails contracts.CatalogTool.Validate
// is skipped) under cfg. Client tools are left out: no worker runs them, and
// their requester gives them to its model itself.
func Build(catalog []contracts.CatalogTool, cfg *Config) (*Surface, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	entries := slices.Clone(catalog)
	sort.Slice(entries, func(i, j int) bool { return entries[i].ID < entries[j].ID })
	s := &Surface{CodeMode: c.engaged()}
	names := newNamer()
	var direct []contracts.CatalogTool
	for _, e := range entries {
		switch err := e.Validate(); {
		case err != nil:
			s.Skipped = append(s.Skipped, fmt.Sprintf("%s: %v", clip(e.ID, 128), err))
			continue
		case e.Source == contracts.SourceClient || e.Tool == "" || contracts.IsCodeModeTool(e.Tool):
			continue
		case s.CodeMode && !e.DirectOnly:
			continue // reached from the run's code
		}
		direct = append(direct, e)
	}
	if s.CodeMode {
		exec, wait := codeModeDefs(entries, &c, names)
		s.Definitions = append(s.Definitions, exec, wait)
	}
	var defs []Definition
	for _, e := range direct {
		d, err := catalogDef(e, names)
		if err != nil {
			s.Skipped = append(s.Skipped, fmt.Sprintf("%s: %v", e.ID, err))
			continue
		}
		defs = append(defs, d)
	}
	sort.Slice(defs, func(i, j int) bool { return defs[i].Name < defs[j].Name })
	s.Definitions = append(s.Definitions, defs...)
	return s, nil
}

// catalogDef is the definition of a catalog tool a model calls directly.
func catalogDef(e contracts.CatalogTool, names *namer) (Definition, error) {
	in, err := objectSchema(e.InputSchema)
	if err != nil {
		return Definition{}, fmt.Errorf("input schema: %w", err)
	}
	desc := e.Description
	if desc == "" {
		desc = e.Label
	}
	desc = clip(desc, MaxDescriptionBytes)
	var out json.RawMessage
	if e.Source == contracts.SourceToolq && len(e.OutputSchema) > 0 {
		// The workers' own output schemas are trusted, so they are
		// declared; an MCP server's is remote metadata, and describes
		// only its structured content.
		if o, err := objectSchema(e.OutputSchema); err == nil && isObjectTyped(e.OutputSchema) {
			out = o
		}
		if h := contracts.TypeHint(e.OutputSchema); h != "" && h != "unknown" {
			desc += "\nReturns " + h + "."
		}
	}
	return Definition{
		Name: names.name(e.Tool), Tool: e.Tool, CatalogID: e.ID,
		Description: desc, InputSchema: in, OutputSchema: out,
	}, nil
}

// objectSchema returns schema as an object schema a model can be given:
// $schema and $id removed from its top, "type": "object" added to a schema
// that names no type. A schema of another type, or one that is a union at
// its top, cannot be a function's parameters.
func objectSchema(schema json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(schema)) == 0 {
		return json.RawMessage(`{"type":"object"}`), nil
	}
	var m map[string]any
	if err := json.Unmarshal(schema, &m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	for _, k := range []string{"oneOf", "anyOf", "allOf", "not", "enum", "const"} {
		if _, ok := m[k]; ok {
			return nil, fmt.Errorf("%s at its top: providers take only an object schema", k)
		}
	}
	switch t := m["type"]; t {
	case nil:
		m["type"] = "object"
	case "object":
	default:
		return nil, fmt.Errorf("type %v at its top: providers take only an object schema", t)
	}
	delete(m, "$schema")
	delete(m, "$id")
	return json.Marshal(m)
}

func isObjectTyped(schema json.RawMessage) bool {
	var m struct {
		Type any `json:"type"`
	}
	return json.Unmarshal(schema, &m) == nil && m.Type == "object"
}

// namer gives each bus tool its model-facing name, unique in one surface.
type namer struct{ used map[string]string }

func newNamer() *namer { return &namer{used: map[string]string{}} }

// name is tool with dots as underscores; a name too long, not starting with
// a letter or underscore, or taken by another tool is cut and ends in a
// hash of the tool.
func (n *namer) name(tool string) string {
	name := strings.ReplaceAll(tool, ".", "_")
	if other, taken := n.used[name]; len(name) > MaxNameBytes || !nameStart(name) || taken && other != tool {
		sum := sha256.Sum256([]byte(tool))
		suffix := "_" + hex.EncodeToString(sum[:4])
		if !nameStart(name) {
			name = "t_" + name
		}
		if len(name) > MaxNameBytes-len(suffix) {
			name = name[:MaxNameBytes-len(suffix)]
		}
		name += suffix
	}
	n.used[name] = tool
	return name
}

func nameStart(s string) bool {
	return s != "" && (s[0] == '_' || s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z')
}

// clip cuts s to at most n bytes of valid UTF-8.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
