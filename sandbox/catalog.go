package sandbox

import (
	"fmt"
	"sort"
	"strings"
	"unicode"

	"github.com/toolq/toolq/contracts"
)

// Catalog is the set of tools one run may use. Entries of source "mcp" are
// reachable only through the MCP namespaces; every other entry is in
// ALL_TOOLS, tools.search and tools.call. A tool not in the catalog cannot be
// called, whatever id the guest guesses.
type Catalog struct {
	tools []Tool
	byID  map[string]int
}

// sourceOpenClawSeed is the code-mode contract's name for the host's own tools, accepted
// beside SourceToolq.
const sourceOpenClawSeed = "openclaw"

// NewCatalog validates tools (non-empty unique ids, a known source) and
// indexes them.
func NewCatalog(tools []Tool) (*Catalog, error) {
	c := &Catalog{tools: tools, byID: make(map[string]int, len(tools))}
	for i, t := range tools {
		if t.ID == "" {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "catalog entry %d has no id", i)
		}
		if _, dup := c.byID[t.ID]; dup {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "catalog id %q appears twice", t.ID)
		}
		switch t.Source {
		case SourceToolq, sourceOpenClawSeed, SourceMCP, SourceClient:
		default:
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "catalog entry %q has unknown source %q", t.ID, t.Source)
		}
		c.byID[t.ID] = i
	}
	return c, nil
}

// Lookup returns the tool with id.
func (c *Catalog) Lookup(id string) (Tool, bool) {
	i, ok := c.byID[id]
	if !ok {
		return Tool{}, false
	}
	return c.tools[i], true
}

// Tools returns every entry.
func (c *Catalog) Tools() []Tool { return c.tools }

// Entries returns the compact entries of ALL_TOOLS (every non-MCP tool).
func (c *Catalog) Entries() []CatalogEntry {
	out := make([]CatalogEntry, 0, len(c.tools))
	for _, t := range c.tools {
		if t.Source != SourceMCP {
			out = append(out, t.CatalogEntry)
		}
	}
	return out
}

// Search ranks the non-MCP entries against query over id, name, label and
// description, best first (ties keep catalog order), and returns at most
// limit of them. An empty query lists the catalog in order.
func (c *Catalog) Search(query string, limit int) []CatalogEntry {
	q := strings.ToLower(strings.TrimSpace(query))
	terms := words(q)
	type hit struct {
		i     int
		score int
	}
	var hits []hit
	for i, t := range c.tools {
		if t.Source == SourceMCP {
			continue
		}
		s := 1
		if q != "" {
			s = score(t.CatalogEntry, q, terms)
		}
		if s > 0 {
			hits = append(hits, hit{i, s})
		}
	}
	sort.SliceStable(hits, func(a, b int) bool { return hits[a].score > hits[b].score })
	if limit >= 0 && len(hits) > limit {
		hits = hits[:limit]
	}
	out := make([]CatalogEntry, len(hits))
	for k, h := range hits {
		out[k] = c.tools[h.i].CatalogEntry
	}
	return out
}

func score(e CatalogEntry, q string, terms []string) int {
	id, name := strings.ToLower(e.ID), strings.ToLower(e.Name)
	label, desc := strings.ToLower(e.Label), strings.ToLower(e.Description)
	s := 0
	if q == id || q == name {
		s += 100
	}
	if strings.Contains(name, q) || strings.Contains(label, q) {
		s += 30
	}
	if strings.Contains(id, q) {
		s += 20
	}
	if strings.Contains(desc, q) {
		s += 10
	}
	fields := []struct {
		words        []string
		exact, start int
	}{
		{words(name + " " + label), 8, 4},
		{words(id), 6, 3},
		{words(desc), 3, 1},
	}
	for _, t := range terms {
		for _, f := range fields {
			best := 0
			for _, w := range f.words {
				switch {
				case w == t:
					best = f.exact
				case best == 0 && (strings.HasPrefix(w, t) || strings.HasPrefix(t, w) && len(w) >= 4):
					best = f.start
				}
			}
			s += best
		}
	}
	return s
}

func words(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// reservedToolNames are never installed as tools.<safeName>: the helpers,
// Object.prototype members and "then" (which would make tools thenable).
var reservedToolNames = map[string]bool{
	"search": true, "describe": true, "call": true, "callValue": true, "then": true,
	"constructor": true, "hasOwnProperty": true, "isPrototypeOf": true, "propertyIsEnumerable": true,
	"toLocaleString": true, "toString": true, "valueOf": true, "__proto__": true,
	"__defineGetter__": true, "__defineSetter__": true, "__lookupGetter__": true, "__lookupSetter__": true,
}

// SafeName turns a tool name into a JavaScript identifier ("" when nothing
// is left).
func SafeName(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r == '_' || r == '$' || r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r)):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	s := b.String()
	if s == "" || strings.Trim(s, "_") == "" {
		return ""
	}
	if s[0] >= '0' && s[0] <= '9' {
		s = "_" + s
	}
	return s
}

// camelName turns "create_issue" or "chrome-devtools" into "createIssue" or
// "chromeDevtools".
func camelName(name string) string {
	parts := strings.FieldsFunc(name, func(r rune) bool {
		return r >= 128 || (!unicode.IsLetter(r) && !unicode.IsDigit(r))
	})
	var b strings.Builder
	for i, p := range parts {
		if i == 0 {
			b.WriteString(strings.ToLower(p[:1]) + p[1:])
		} else {
			b.WriteString(strings.ToUpper(p[:1]) + p[1:])
		}
	}
	s := b.String()
	if s != "" && s[0] >= '0' && s[0] <= '9' {
		s = "_" + s
	}
	return s
}

// SafeNames maps tools.<safeName> to catalog ids: only names that exactly
// one non-MCP entry produces, and never a helper or Object.prototype name.
func (c *Catalog) SafeNames() map[string]string {
	count := map[string]int{}
	owner := map[string]string{}
	for _, t := range c.tools {
		if t.Source == SourceMCP {
			continue
		}
		n := SafeName(t.Name)
		if n == "" || reservedToolNames[n] {
			continue
		}
		count[n]++
		owner[n] = t.ID
	}
	out := map[string]string{}
	for n, k := range count {
		if k == 1 {
			out[n] = owner[n]
		}
	}
	return out
}

type mcpServer struct {
	Tools       map[string]string `json:"tools"`
	Declaration string            `json:"declaration"`
}

// mcpServerName is the owner of an MCP tool: its sourceName, or the middle
// part of mcp:<owner>:<tool>.
func mcpServerName(t Tool) string {
	if t.SourceName != "" {
		return t.SourceName
	}
	parts := strings.SplitN(t.ID, ":", 3)
	if len(parts) == 3 {
		return parts[1]
	}
	return "mcp"
}

// mcpNamespaces groups the MCP entries into namespaces (MCP.<server>.<tool>) with a
// TypeScript-style declaration per server.
func (c *Catalog) mcpNamespaces() map[string]mcpServer {
	type fn struct {
		name string
		tool Tool
	}
	groups := map[string][]fn{}
	var order []string
	for _, t := range c.tools {
		if t.Source != SourceMCP {
			continue
		}
		ns := camelName(mcpServerName(t))
		if ns == "" {
			continue
		}
		if _, ok := groups[ns]; !ok {
			order = append(order, ns)
		}
		groups[ns] = append(groups[ns], fn{camelName(t.Name), t})
	}
	out := map[string]mcpServer{}
	for _, ns := range order {
		count := map[string]int{}
		for _, f := range groups[ns] {
			count[f.name]++
		}
		srv := mcpServer{Tools: map[string]string{}}
		var d strings.Builder
		fmt.Fprintf(&d, "declare namespace MCP.%s {\n", ns)
		d.WriteString("  /** Returns this TypeScript-style API header. */\n")
		d.WriteString("  function $api(toolName?: string, options?: { schema?: boolean }): Promise<string>;\n")
		for _, f := range groups[ns] {
			if f.name == "" || f.name == "$api" || count[f.name] != 1 || reservedToolNames[f.name] {
				continue
			}
			srv.Tools[f.name] = f.tool.ID
			d.WriteString("\n  /**\n")
			for _, line := range strings.Split(strings.TrimSpace(f.tool.Description), "\n") {
				fmt.Fprintf(&d, "   * %s\n", strings.ReplaceAll(line, "*/", "*\\/"))
			}
			fmt.Fprintf(&d, "   * @id %s\n   */\n", f.tool.ID)
			input := strings.TrimSpace(f.tool.Input)
			if input == "" {
				input = "unknown"
			}
			output := "McpToolResult"
			if o := strings.TrimSpace(f.tool.Output); o != "" {
				output = o
			}
			fmt.Fprintf(&d, "  function %s(input: %s): Promise<%s>;\n", f.name, input, output)
		}
		d.WriteString("}\n")
		srv.Declaration = d.String()
		out[ns] = srv
	}
	return out
}
