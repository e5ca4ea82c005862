package contracts

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Tool names of code mode on the bus. Tools under "code_mode." are never
// reachable from guest code.
const (
	ToolCodeModeExec   = "code_mode.exec"
	ToolCodeModeWait   = "code_mode.wait"
	ToolCodeModeResult = "code_mode.result"
	codeModePrefix     = "code_mode."
)

// IsCodeModeTool reports whether tool is one of code mode's own tools.
func IsCodeModeTool(tool string) bool { return strings.HasPrefix(tool, codeModePrefix) }

// Catalog sources.
const (
	SourceToolq  = "toolq"
	SourceMCP    = "mcp"
	SourceClient = "client"
)

// CatalogTool is an entry of the toolq_catalog bucket: a tool code-mode runs
// can see and call. Workers register their tools; requesters register
// client tools (which no worker runs: their calls are returned to the
// requester in the waiting event).
type CatalogTool struct {
	// ID is <source>:<owner>:<name>, e.g. toolq:core:noop.
	ID string `json:"id"`
	// Tool is the bus tool that runs it (toolq.jobs.<tool>); empty for
	// client tools.
	Tool        string `json:"tool,omitempty"`
	Name        string `json:"name"`
	Label       string `json:"label,omitempty"`
	Description string `json:"description"`
	Source      string `json:"source"`
	// InputSchema and OutputSchema are JSON Schemas; a declared output
	// schema is enforced on every result before the guest sees it.
	InputSchema  json.RawMessage `json:"inputSchema,omitempty"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	// DirectOnly tools are never listed in ALL_TOOLS nor callable from code.
	DirectOnly bool `json:"directOnly,omitempty"`
	// SideEffects marks tools refused in restartSafe runs.
	SideEffects bool `json:"sideEffects,omitempty"`
	// UpdatedAt is when the entry was last registered.
	UpdatedAt time.Time `json:"updatedAt"`
	// Tenants, when set, are the only tenants whose runs see the entry
	// ("" is the default tenant): a worker's tool kept to them
	// (worker.ToolConfig.Tenants), an MCP server configured for them.
	// Only workers set it, on their own (plain) keys; a tenant's client
	// tool is its tenant's by its key and carries none.
	Tenants []string `json:"tenants,omitempty"`
	// TTLSeconds is how long the entry lives after it was last written
	// (the bucket's own timestamp of the write, not UpdatedAt): workers
	// write their entries again every third of it while they serve the
	// tool, so an entry whose workers are all gone leaves every run's
	// catalog. A workers' entry without one never expires (workers older
	// than the rule); a client tool's is DefaultClientToolTTL when absent
	// and at most MaxClientToolTTL. See Expired.
	TTLSeconds int `json:"ttlSeconds,omitempty"`
}

// VisibleTo reports whether a run of tenant may see the entry by its
// Tenants (a client tool's tenant is in its key: see ParseCatalogKey).
func (c *CatalogTool) VisibleTo(tenant string) bool {
	if c.Tenants == nil {
		return true
	}
	for _, t := range c.Tenants {
		if t == tenant {
			return true
		}
	}
	return false
}

// The lifetime of client tools in the catalog: a requester registers one
// again (RegisterClientTool) to keep it longer.
const (
	DefaultClientToolTTL = 24 * time.Hour
	MaxClientToolTTL     = 7 * 24 * time.Hour
)

// TTL is how long the entry lives after its last write; 0 for never.
func (c *CatalogTool) TTL() time.Duration {
	ttl := time.Duration(max(c.TTLSeconds, 0)) * time.Second
	if c.Source != SourceClient {
		return ttl
	}
	if ttl == 0 {
		return DefaultClientToolTTL
	}
	return min(ttl, MaxClientToolTTL)
}

// Expired reports whether the entry, last written at written (the bucket
// entry's Created time), is past its TTL at now.
func (c *CatalogTool) Expired(written, now time.Time) bool {
	ttl := c.TTL()
	return ttl > 0 && !now.Before(written.Add(ttl))
}

// Validate checks an entry that came from outside.
func (c *CatalogTool) Validate() error {
	parts := strings.Split(c.ID, ":")
	if len(parts) != 3 {
		return Errorf(CodeInvalidInput, "catalog id %q: want <source>:<owner>:<name>", clip(c.ID, 64))
	}
	for _, p := range parts {
		if !ValidID(p) {
			return Errorf(CodeInvalidInput, "catalog id %q: each part must match [A-Za-z0-9_-]{1,128}", clip(c.ID, 64))
		}
	}
	switch c.Source {
	case SourceToolq, SourceMCP, SourceClient:
	default:
		return Errorf(CodeInvalidInput, "catalog source %q: want toolq, mcp or client", c.Source)
	}
	if parts[0] != c.Source {
		return Errorf(CodeInvalidInput, "catalog id %q does not start with its source %q", c.ID, c.Source)
	}
	if c.Source != SourceClient {
		if err := ValidateTool(c.Tool); err != nil {
			return err
		}
		if IsCodeModeTool(c.Tool) {
			return Errorf(CodeInvalidInput, "code mode's own tools cannot be in the catalog")
		}
	}
	if c.Name == "" {
		return Errorf(CodeInvalidInput, "catalog entry %q needs a name", c.ID)
	}
	if c.Source == SourceClient && c.Tenants != nil {
		return Errorf(CodeInvalidInput, "catalog entry %q: a client tool is its tenant's by its key and names no tenants", c.ID)
	}
	for _, t := range c.Tenants {
		if t != "" && !ValidID(t) {
			return Errorf(CodeInvalidInput, "catalog entry %q names tenant %q, not an id", c.ID, clip(t, 64))
		}
	}
	for _, s := range []json.RawMessage{c.InputSchema, c.OutputSchema} {
		if len(s) > 0 && !json.Valid(s) {
			return Errorf(CodeInvalidInput, "catalog entry %q has a schema that is not JSON", c.ID)
		}
	}
	return nil
}

// CatalogKey is the KV key of a catalog id (colons are not allowed in keys).
func CatalogKey(id string) string { return strings.ReplaceAll(id, ":", ".") }

// TenantCatalogKey is the KV key of a named tenant's client tool:
// t.<tenant>.<CatalogKey(id)>. A tenant writes it through its import, as
// the plain CatalogKey; the server puts the tenant in. The default
// tenant's keys are the plain ones.
func TenantCatalogKey(tenant, id string) string {
	if tenant == "" {
		return CatalogKey(id)
	}
	return tenantToken + "." + tenant + "." + CatalogKey(id)
}

// ParseCatalogKey splits a catalog bucket key into the tenant named by its
// t.<tenant>. prefix ("" for a plain key: workers' tools, and the default
// tenant's client tools) and the key of the id. ok is false for a key of
// no valid shape.
func ParseCatalogKey(key string) (tenant, idKey string, ok bool) {
	parts := strings.Split(key, ".")
	switch {
	case len(parts) == 3:
		return "", key, true
	case len(parts) == 5 && parts[0] == tenantToken && ValidID(parts[1]):
		return parts[1], strings.Join(parts[2:], "."), true
	}
	return "", "", false
}

// ToolResult is the input of a code_mode.result job: the outcome of one
// nested call of a code-mode run, sent by the worker that ran it (or by the
// requester, for a client tool).
type ToolResult struct {
	RunID  string          `json:"runId"`
	CallID string          `json:"callId"`
	JobID  string          `json:"jobId,omitempty"`
	Status Status          `json:"status"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
	// Token echoes the pending call's token: Parent.Token of the nested
	// job, or the Token of a client call in the run's waiting result. A
	// run refuses a result without the right one.
	Token string `json:"token,omitempty"`
}

// Validate checks a tool result that came from outside.
func (r *ToolResult) Validate() error {
	if err := ValidateID("runId", r.RunID); err != nil {
		return err
	}
	if err := ValidateID("callId", r.CallID); err != nil {
		return err
	}
	if r.JobID != "" {
		if err := ValidateID("jobId", r.JobID); err != nil {
			return err
		}
	}
	if err := ValidateCallToken("token", r.Token); err != nil {
		return err
	}
	if !r.Status.Terminal() {
		return Errorf(CodeInvalidInput, "tool result status %q is not terminal", r.Status)
	}
	if r.Status == StatusCompleted && len(r.Result) > 0 && !json.Valid(r.Result) {
		return Errorf(CodeInvalidInput, "tool result is not valid JSON")
	}
	return nil
}

// CallTokenBytes is the entropy of a call token: 128 bits.
const CallTokenBytes = 16

// NewCallToken returns a fresh call token: CallTokenBytes from crypto/rand
// as unpadded base64url, inside the id alphabet [A-Za-z0-9_-].
func NewCallToken() (string, error) {
	var b [CallTokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("contracts: call token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// ValidateCallToken checks a call token that came from outside: empty (a
// call made before tokens) or an id of at most MaxIDLength bytes. Its
// errors are *Error with code invalid_input, and never repeat the token.
func ValidateCallToken(what, token string) error {
	if token != "" && !ValidID(token) {
		return Errorf(CodeInvalidInput, "%s is not a valid call token: want [A-Za-z0-9_-]{1,%d}", what, MaxIDLength)
	}
	return nil
}

// NestedJobID is the deterministic id of the job of call callID of run
// runID, so a repeated submit of the call enqueues it once.
func NestedJobID(runID, callID string) string {
	id := runID + "-" + callID
	if len(id) <= MaxIDLength {
		return id
	}
	sum := sha256.Sum256([]byte(runID))
	return hex.EncodeToString(sum[:16]) + "-" + callID
}

// ToolResultJobID is the id of the code_mode.result job that reports the
// end of nested job jobID; deterministic, so reporting twice enqueues once.
// HeaderCatalogSeq is the job header a requester sets on a code-mode job
// after it registered client tools: the catalog bucket's sequence of its
// last registration. A worker whose catalog mirror has not yet applied it
// waits for it (bounded) before building the run's catalog, so a tool just
// registered is in the run that follows.
const HeaderCatalogSeq = "Toolq-Catalog-Seq"

func ToolResultJobID(jobID string) string {
	if len(jobID) > MaxIDLength-2 {
		jobID = jobID[:MaxIDLength-2]
	}
	return jobID + "-r"
}
