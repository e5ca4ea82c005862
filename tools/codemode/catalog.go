package codemode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/sandbox"
)

// catalog mirrors the toolq_catalog bucket in memory.
//
// Workers write the entries of their tools (toolq:…, mcp:…) under plain
// keys, and every run sees them. Client tools are a tenant's own: the
// default tenant's under plain keys, a named tenant's under
// t.<tenant>.<key>, which the tenant writes through its import (the server
// puts the tenant in). A run sees the workers' entries and its own
// tenant's client tools, never another tenant's.
type catalog struct {
	mu      sync.RWMutex
	entries map[string]catalogEntry // by bucket key
	clients map[string]int          // client tools held, by tenant
	log     *slog.Logger
	// applied is the bucket sequence of the last entry applied; moved is
	// closed (and replaced) each time it grows.
	applied uint64
	moved   chan struct{}
}

// waitApplied waits until the mirror has applied the bucket's entry at seq
// (a requester's registration, contracts.HeaderCatalogSeq), at most d; it
// reports whether it has.
func (c *catalog) waitApplied(ctx context.Context, seq uint64, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		c.mu.Lock()
		if c.applied >= seq {
			c.mu.Unlock()
			return true
		}
		if c.moved == nil {
			c.moved = make(chan struct{})
		}
		moved := c.moved
		c.mu.Unlock()
		select {
		case <-moved:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// catalogEntry is one entry and the tenant it belongs to ("" for the
// workers' tools and the default tenant's client tools).
type catalogEntry struct {
	tool contracts.CatalogTool
	// run is the tool as a run's sandbox takes it (toSandbox: its type
	// hints parsed from the schemas), made once when the entry is taken
	// rather than at every exec.
	run    sandbox.Tool
	tenant string
	// written is when the bucket last took the entry (the server's
	// timestamp), raw what it took: a refresh writes the same bytes.
	written time.Time
	raw     []byte
}

// expired reports an entry past its TTL (contracts.CatalogTool.Expired):
// its workers stopped refreshing it, or its client tool was not
// registered again.
func (e *catalogEntry) expired(now time.Time) bool { return e.tool.Expired(e.written, now) }

// MaxClientTools is how many client tools one tenant may hold in the
// catalog; an entry past it is refused (each run copies its tenant's
// client tools into its VM).
const MaxClientTools = 64

// watch loads the bucket and follows it until ctx ends; it returns once the
// current entries are loaded.
func (c *catalog) watch(ctx context.Context, kv jetstream.KeyValue, done func()) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		done()
		return fmt.Errorf("codemode: watch catalog: %w", err)
	}
	ready := make(chan struct{})
	go func() {
		defer done()
		initial := true
		for e := range w.Updates() {
			if e == nil {
				if initial {
					initial = false
					close(ready)
				}
				continue
			}
			c.apply(e)
		}
		if initial {
			close(ready)
		}
	}()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *catalog) apply(e jetstream.KeyValueEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Revision() > c.applied {
		c.applied = e.Revision()
		if c.moved != nil {
			close(c.moved)
			c.moved = nil
		}
	}
	key := e.Key()
	if e.Operation() != jetstream.KeyValuePut {
		c.remove(key)
		return
	}
	if held, ok := c.entries[key]; ok && bytes.Equal(held.raw, e.Value()) {
		// A refresh: the same entry, written again.
		held.written = e.Created()
		c.entries[key] = held
		return
	}
	tenant, idKey, ok := contracts.ParseCatalogKey(key)
	if !ok {
		c.log.Warn("catalog entry refused: key of no known shape", slog.String("key", key))
		return
	}
	var t contracts.CatalogTool
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		c.log.Warn("catalog entry unreadable", slog.String("key", key), slog.Any("err", err))
		return
	}
	// Catalog entries come from any process on the bus: validate them.
	err := t.Validate()
	switch {
	case err != nil:
	case contracts.CatalogKey(t.ID) != idKey:
		err = fmt.Errorf("entry %q is not stored under its own key", t.ID)
	case tenant != "" && t.Source != contracts.SourceClient:
		// Only workers write tools that run on the bus, and they write
		// plain keys (the bus permissions let nobody else).
		err = fmt.Errorf("a tenant's entry must be a client tool, not %q", t.Source)
	case len(t.OutputSchema) > 0 && string(t.OutputSchema) != "{}":
		// Compiled before any run can call the tool: a schema that does
		// not compile would fail every result, so the tool is not offered.
		if _, cerr := compileOutput(t.OutputSchema); cerr != nil {
			err = fmt.Errorf("output schema: %w", cerr)
		}
	}
	if err != nil {
		c.log.Warn("catalog entry refused", slog.String("key", key), slog.Any("err", err))
		c.remove(key) // an entry replaced by a refused one is gone, not kept stale
		return
	}
	client := t.Source == contracts.SourceClient
	if _, held := c.entries[key]; !held && client && c.clients[tenant] >= MaxClientTools {
		c.pruneClients(tenant, time.Now())
	}
	if _, held := c.entries[key]; !held && client && c.clients[tenant] >= MaxClientTools {
		c.log.Warn("catalog entry refused: the tenant holds the most client tools allowed",
			slog.String("key", key), slog.String("tenant", tenant), slog.Int("max", MaxClientTools))
		return
	}
	c.remove(key)
	c.entries[key] = catalogEntry{tool: t, run: toSandbox(t), tenant: tenant, written: e.Created(), raw: bytes.Clone(e.Value())}
	if client {
		c.clients[tenant]++
	}
}

// remove drops the entry under key, if any; c.mu is held.
func (c *catalog) remove(key string) {
	old, ok := c.entries[key]
	if !ok {
		return
	}
	delete(c.entries, key)
	if old.tool.Source == contracts.SourceClient {
		c.clients[old.tenant]--
	}
}

// pruneClients drops tenant's expired client tools, which then no longer
// count against MaxClientTools; c.mu is held.
func (c *catalog) pruneClients(tenant string, now time.Time) {
	for key, e := range c.entries {
		if e.tenant == tenant && e.tool.Source == contracts.SourceClient && e.expired(now) {
			c.remove(key)
		}
	}
}

// lookup returns the entry of id that a run of tenant may see.
func (c *catalog) lookup(tenant, id string) (contracts.CatalogTool, bool) {
	key := contracts.CatalogKey(id)
	if strings.HasPrefix(id, contracts.SourceClient+":") {
		key = contracts.TenantCatalogKey(tenant, id)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	e, ok := c.entries[key]
	if !ok || !e.tool.VisibleTo(tenant) || e.expired(time.Now()) {
		return contracts.CatalogTool{}, false
	}
	return e.tool, true
}

// runCatalog is what one run may use: the sandbox's tools and, by id, how
// to call them.
type runCatalog struct {
	tools []sandbox.Tool
	refs  map[string]catalogRef
}

// forRun builds the catalog of a run of tenant: every entry it may see
// (workers' tools, and its own tenant's client tools) that the worker's
// policy allows,
// narrowed to the job's list when it has one, never a denied, direct-only or
// code-mode tool. The shell exec tool is there only when the worker enables
// it (shellExec) and the job's list names it: the code-mode contract never
// exposes the plain shell to guest code by default.
func (c *catalog) forRun(tenant string, allow, deny, job []string, shellExec bool) runCatalog {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var rc runCatalog
	rc.refs = map[string]catalogRef{}
	visible := make([]*catalogEntry, 0, len(c.entries))
	now := time.Now()
	for _, e := range c.entries {
		// Workers' tools are everyone's (or their Tenants'); client tools
		// their tenant's; an expired entry is nobody's.
		if e.tool.Source == contracts.SourceClient && e.tenant != tenant || !e.tool.VisibleTo(tenant) || e.expired(now) {
			continue
		}
		visible = append(visible, &e)
	}
	sort.Slice(visible, func(i, j int) bool { return visible[i].tool.ID < visible[j].tool.ID })
	for _, e := range visible {
		t := &e.tool
		id := t.ID
		switch {
		case t.DirectOnly, contracts.IsCodeModeTool(t.Tool), slices.Contains(deny, id):
			continue
		case len(allow) > 0 && !slices.Contains(allow, id):
			continue
		case job != nil && !slices.Contains(job, id):
			continue
		case t.Tool == contracts.ToolExec && (!shellExec || !slices.Contains(job, id)):
			continue
		}
		rc.tools = append(rc.tools, e.run)
		rc.refs[id] = catalogRef{Tool: t.Tool, Source: t.Source, OutputSchema: t.OutputSchema, SideEffects: t.SideEffects}
	}
	return rc
}

func toSandbox(t contracts.CatalogTool) sandbox.Tool {
	src := t.Source
	if src == contracts.SourceToolq {
		src = sandbox.SourceToolq
	}
	owner := strings.SplitN(t.ID, ":", 3)[1]
	params := t.InputSchema
	if len(params) == 0 {
		params = json.RawMessage(`{}`)
	}
	output := contracts.TypeHint(t.OutputSchema)
	if t.Source == contracts.SourceMCP && t.Name != contracts.MCPResourcesRead && t.Name != contracts.MCPPromptsGet {
		// A server's tool: its schema is the McpToolResult's (a server's
		// resources and prompts have toolq's own result types).
		output = mcpOutputHint(t.OutputSchema)
	}
	return sandbox.Tool{
		CatalogEntry: sandbox.CatalogEntry{
			ID: t.ID, Name: t.Name, Label: t.Label, Description: t.Description,
			Source: src, SourceName: owner, Input: contracts.TypeHint(t.InputSchema), Output: output,
		},
		Parameters:   params,
		OutputSchema: t.OutputSchema,
	}
}

// mcpOutputHint is what an MCP namespace call returns: the output schema of
// an MCP entry describes the whole McpToolResult, so the hint is
// McpToolResult with the type of its structuredContent ("" — plain
// McpToolResult — when the tool declares none).
func mcpOutputHint(schema json.RawMessage) string {
	var s struct {
		Properties struct {
			StructuredContent json.RawMessage `json:"structuredContent"`
		} `json:"properties"`
	}
	if len(schema) == 0 || json.Unmarshal(schema, &s) != nil || len(s.Properties.StructuredContent) == 0 || string(s.Properties.StructuredContent) == "null" {
		return ""
	}
	return "McpToolResult & { structuredContent?: " + contracts.TypeHint(s.Properties.StructuredContent) + " }"
}
