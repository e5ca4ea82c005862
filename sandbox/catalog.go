package sandbox

import (
	"bytes"
	"encoding/json"
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
	Tools map[string]string `json:"tools"`
	// Resources and Prompts are the catalog ids of the server's
	// resources.read and prompts.get ("" when it has none).
	Resources   string `json:"resources,omitempty"`
	Prompts     string `json:"prompts,omitempty"`
	Declaration string `json:"declaration"`
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

// mcpFn is one function of an MCP namespace: a tool (MCP.<ns>.<name>) or
// a capability (MCP.<ns>.resources.read, MCP.<ns>.prompts.get).
type mcpFn struct {
	name string // the function's name in the namespace
	tool Tool
}

// mcpGroup is one namespace: its callable functions in catalog order.
type mcpGroup struct {
	fns       []mcpFn
	resources *Tool
	prompts   *Tool
}

// mcpFnName is the name of an MCP entry's function in its namespace.
func mcpFnName(t Tool) string {
	if t.Name == contracts.MCPResourcesRead || t.Name == contracts.MCPPromptsGet {
		return t.Name
	}
	return camelName(t.Name)
}

// mcpGroups groups the MCP entries into namespaces, in catalog order. A
// tool whose function name is taken ($api, a helper, two tools of one
// name, resources or prompts when the server offers them) is left out.
func (c *Catalog) mcpGroups() ([]string, map[string]*mcpGroup) {
	groups := map[string]*mcpGroup{}
	var order []string
	var tools []mcpFn
	for i := range c.tools {
		t := c.tools[i]
		if t.Source != SourceMCP {
			continue
		}
		ns := camelName(mcpServerName(t))
		if ns == "" {
			continue
		}
		g, ok := groups[ns]
		if !ok {
			g = &mcpGroup{}
			groups[ns] = g
			order = append(order, ns)
		}
		switch t.Name {
		case contracts.MCPResourcesRead:
			g.resources = &c.tools[i]
		case contracts.MCPPromptsGet:
			g.prompts = &c.tools[i]
		default:
			tools = append(tools, mcpFn{ns + "." + camelName(t.Name), t})
		}
	}
	count := map[string]int{}
	for _, f := range tools {
		count[f.name]++
	}
	for _, f := range tools {
		ns, name, _ := strings.Cut(f.name, ".")
		g := groups[ns]
		switch {
		case name == "" || name == "$api" || count[f.name] != 1 || reservedToolNames[name],
			name == "resources" && g.resources != nil, name == "prompts" && g.prompts != nil:
			continue
		}
		g.fns = append(g.fns, mcpFn{name, f.tool})
	}
	return order, groups
}

// mcpNamespaces groups the MCP entries into namespaces (MCP.<server>.<tool>) with a
// TypeScript-style declaration per server.
func (c *Catalog) mcpNamespaces() map[string]mcpServer {
	order, groups := c.mcpGroups()
	out := map[string]mcpServer{}
	for _, ns := range order {
		g := groups[ns]
		srv := mcpServer{Tools: map[string]string{}, Declaration: g.declaration(ns, nil, false)}
		for _, f := range g.fns {
			srv.Tools[f.name] = f.tool.ID
		}
		if g.resources != nil {
			srv.Resources = g.resources.ID
		}
		if g.prompts != nil {
			srv.Prompts = g.prompts.ID
		}
		out[ns] = srv
	}
	return out
}

// mcpAPI is $api(toolName, {schema}) of namespace ns: the declaration of
// the whole namespace (toolName "") or of one function, named as the
// namespace names it (createIssue, resources.read), as the server names it
// (create_issue) or by its catalog id; with schema, each function's doc
// comment also carries its input and output JSON Schemas.
func (c *Catalog) mcpAPI(ns, toolName string, schema bool) (string, error) {
	_, groups := c.mcpGroups()
	g, ok := groups[ns]
	if !ok {
		return "", fmt.Errorf("MCP.%s is not a namespace of this run", ns)
	}
	if toolName == "" {
		return g.declaration(ns, nil, schema), nil
	}
	for _, f := range g.all() {
		if toolName == f.name || toolName == f.tool.Name || toolName == f.tool.ID {
			return g.declaration(ns, &f, schema), nil
		}
	}
	return "", fmt.Errorf("MCP.%s has no tool %q", ns, toolName)
}

// all is every function of g, the capabilities under their dotted names.
func (g *mcpGroup) all() []mcpFn {
	out := append([]mcpFn(nil), g.fns...)
	if g.resources != nil {
		out = append(out, mcpFn{contracts.MCPResourcesRead, *g.resources})
	}
	if g.prompts != nil {
		out = append(out, mcpFn{contracts.MCPPromptsGet, *g.prompts})
	}
	return out
}

// declaration renders namespace ns (only one function of it when only is
// set), with the functions' schemas when schema is true.
func (g *mcpGroup) declaration(ns string, only *mcpFn, schema bool) string {
	var d strings.Builder
	fmt.Fprintf(&d, "declare namespace MCP.%s {\n", ns)
	if only == nil {
		d.WriteString("  /** Returns this TypeScript-style API header (of one tool with toolName; with schema: true, with JSON Schemas). */\n")
		d.WriteString("  function $api(toolName?: string, options?: { schema?: boolean }): Promise<string>;\n")
	}
	for _, f := range g.all() {
		if only != nil && f.tool.ID != only.tool.ID {
			continue
		}
		name, indent := f.name, "  "
		space, fn, _ := strings.Cut(f.name, ".")
		if fn != "" {
			name, indent = fn, "    "
			fmt.Fprintf(&d, "\n  namespace %s {", space)
		}
		d.WriteString("\n" + indent + "/**\n")
		for _, line := range strings.Split(strings.TrimSpace(f.tool.Description), "\n") {
			fmt.Fprintf(&d, "%s * %s\n", indent, commentSafe(line))
		}
		fmt.Fprintf(&d, "%s * @id %s\n", indent, f.tool.ID)
		if schema {
			params := string(f.tool.Parameters)
			if params == "" {
				params = "{}"
			}
			fmt.Fprintf(&d, "%s * @inputSchema %s\n", indent, commentSafe(compactJSON(params)))
			if len(f.tool.OutputSchema) > 0 {
				fmt.Fprintf(&d, "%s * @outputSchema %s\n", indent, commentSafe(compactJSON(string(f.tool.OutputSchema))))
			}
		}
		d.WriteString(indent + " */\n")
		input := strings.TrimSpace(f.tool.Input)
		if input == "" {
			input = "unknown"
		}
		output := "McpToolResult"
		if o := strings.TrimSpace(f.tool.Output); o != "" {
			output = o
		}
		fmt.Fprintf(&d, "%sfunction %s(input: %s): Promise<%s>;\n", indent, name, input, output)
		if fn != "" {
			d.WriteString("  }\n")
		}
	}
	d.WriteString("}\n")
	return d.String()
}

// commentSafe keeps a line from ending its doc comment.
func commentSafe(s string) string { return strings.ReplaceAll(s, "*/", "*\\/") }

func compactJSON(s string) string {
	var b bytes.Buffer
	if json.Compact(&b, []byte(s)) != nil {
		return s
	}
	return b.String()
}
