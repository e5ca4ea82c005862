package sandbox

import (
	"context"
	"encoding/json"

	"github.com/toolq/toolq/contracts"
)

// Input is the exec input of the code-mode contract: one of Code or Command, and a
// language.
type Input struct {
	Code     string `json:"code,omitempty"`
	Command  string `json:"command,omitempty"`
	Language string `json:"language,omitempty"`
}

// Languages accepted by Input.Language.
const (
	LanguageJavaScript = contracts.CodeModeJavaScript
	LanguageTypeScript = contracts.CodeModeTypeScript
)

// Status of a Result.
type Status = contracts.CodeModeStatus

// Result statuses.
const (
	StatusCompleted = contracts.CodeModeCompleted
	StatusWaiting   = contracts.CodeModeWaiting
	StatusFailed    = contracts.CodeModeFailed
)

// Waiting reasons.
const (
	ReasonPendingTools = contracts.CodeModeReasonPendingTools
	ReasonYield        = contracts.CodeModeReasonYield
)

// Result is the contract's CodeModeResult: completed {value, output, telemetry},
// waiting {runId, reason, pendingToolCalls, output, telemetry} or failed
// {error, code, output, telemetry}. It is declared in contracts, so a
// requester reads it without importing the engine.
type Result = contracts.CodeModeResult

// Output is one item of a run's output: {type:"text", text} or
// {type:"json", value}.
type Output = contracts.CodeModeOutput

// Output types.
const (
	OutputText = contracts.CodeModeOutputText
	OutputJSON = contracts.CodeModeOutputJSON
)

// Telemetry counts what a run did, over exec and every resume.
type Telemetry = contracts.CodeModeTelemetry

// BridgeCalls counts calls through the host bridge.
type BridgeCalls = contracts.CodeModeBridgeCalls

// PendingToolCall is a nested tool call the guest awaits.
type PendingToolCall = contracts.CodeModePendingToolCall

// CatalogEntry is the compact catalog entry the guest sees in ALL_TOOLS and
// tools.search results. ID has the form <source>:<owner>:<tool-name>.
type CatalogEntry struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Label       string `json:"label,omitempty"`
	Description string `json:"description"`
	// Source is "openclaw", "mcp" or "client" (the code-mode contract).
	Source     string `json:"source"`
	SourceName string `json:"sourceName,omitempty"`
	// Input is a compact input hint, such as "{ path: string }".
	Input  string `json:"input"`
	Output string `json:"output,omitempty"`
}

// Tool is a catalog entry with its schemas, as tools.describe returns it.
type Tool struct {
	CatalogEntry
	Parameters   json.RawMessage `json:"parameters"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
}

// Tool sources.
const (
	SourceToolq = contracts.SourceToolq
	// SourceOpenClaw is the contract's name for toolq's own tools; toolq
	// reports them as SourceToolq.
	SourceOpenClaw = SourceToolq
	SourceMCP      = contracts.SourceMCP
	SourceClient   = contracts.SourceClient
)

// ToolCall is a nested call the guest makes.
type ToolCall struct {
	RunID  string
	CallID string
	Tool   Tool
	Input  json.RawMessage
}

// CallOutcome is a bridge's answer to a ToolCall: Pending (settled later by
// a Settlement with the call's ID), or settled now with Value or Error.
type CallOutcome struct {
	Pending bool
	Value   json.RawMessage
	Error   string
}

// Settlement settles a pending call: Error non-empty rejects it (the guest
// sees a plain Error with that message), otherwise Value (JSON; empty means
// null) resolves it.
type Settlement struct {
	CallID string          `json:"callId"`
	Value  json.RawMessage `json:"value,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// Bridge is the host side of the guest runtime. Calls are made on the
// goroutine running Exec or Resume, while the VM waits, with a ctx that ends
// at the run's deadline: a Bridge must return promptly (a slow tool is a
// pending call) and must not keep the ctx.
type Bridge interface {
	// Search ranks the run's catalog for tools.search. limit is already
	// defaulted and capped.
	Search(ctx context.Context, catalog *Catalog, query string, limit int) ([]CatalogEntry, error)
	// Describe returns the entry with schemas for tools.describe. The id is
	// known to be in the run's catalog.
	Describe(ctx context.Context, tool Tool) (Tool, error)
	// Call starts a nested tool call. The tool is in the run's catalog. An
	// error is given to the guest as a plain Error.
	Call(ctx context.Context, call ToolCall) (CallOutcome, error)
}

// CatalogBridge implements Search and Describe over the run's catalog; embed
// it and add Call.
type CatalogBridge struct{}

// Search ranks the catalog with Catalog.Search.
func (CatalogBridge) Search(_ context.Context, c *Catalog, query string, limit int) ([]CatalogEntry, error) {
	return c.Search(query, limit), nil
}

// Describe returns the tool as it is.
func (CatalogBridge) Describe(_ context.Context, t Tool) (Tool, error) { return t, nil }
