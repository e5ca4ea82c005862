package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolq/toolq/contracts"
)

// Tool is one tool of an MCP server, as a toolq tool.
type Tool struct {
	// Name is the bus tool, mcp.<server>.<tool>: jobs on
	// toolq.jobs.mcp.<server>.<tool> call it.
	Name string
	// Catalog is its code-mode catalog entry: id mcp:<server>:<tool>,
	// source mcp, the tool's description and input schema, and as output
	// schema the McpToolResult with the tool's own output schema (if any)
	// as structuredContent.
	Catalog contracts.CatalogTool

	srv      *server
	remote   string // the tool's name on the server (the method, for resources and prompts)
	inSchema *jsonschema.Schema
	kind     kind
}

// Server is the name of the tool's server.
func (t Tool) Server() string { return t.srv.name }

// Result is the code-mode contract's McpToolResult: what an MCP tool call returns to the
// guest. A tool that reports an error (isError) still completes: the guest
// decides what to do with it.
type Result = contracts.MCPToolResult

// Handle calls the tool with the job's input, which must be a JSON object
// (or empty) matching the tool's input schema, and returns the Result.
// Errors are *contracts.Error: invalid_input for a bad input or a server
// that refuses the arguments, provider_unavailable (retryable) when the
// server cannot be reached or the session broke — the next call connects
// again —, provider_error for any other refusal, timeout and cancelled
// for the job's own context.
func (t Tool) Handle(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
	args, err := t.arguments(job.Input)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.srv.common.CallTimeout)
		defer cancel()
	}
	sess, err := t.srv.session(ctx)
	if err != nil {
		return nil, t.fail(ctx, err, "connect")
	}
	var out json.RawMessage
	switch t.kind {
	case kindResource:
		out, err = t.readResource(ctx, sess.cs, args)
	case kindPrompt:
		out, err = t.getPrompt(ctx, sess.cs, args)
	default:
		var res *sdk.CallToolResult
		if res, err = sess.cs.CallTool(ctx, &sdk.CallToolParams{Name: t.remote, Arguments: args}); err == nil {
			if out, err = toResult(res); err != nil {
				err = unusable{err}
			}
		}
	}
	var bad unusable
	switch {
	case errors.As(err, &bad):
		return nil, &contracts.Error{Code: contracts.CodeProviderError, Message: fmt.Sprintf("mcp %s: %s: %v", t.srv.name, t.remote, bad)}
	case err != nil:
		cerr := t.fail(ctx, err, "call")
		if cerr.Code == contracts.CodeProviderUnavailable {
			// The session is broken (a slow tool is not: its timeout
			// leaves the session to the other calls).
			t.srv.drop(sess)
		}
		return nil, cerr
	}
	return out, nil
}

// arguments checks the input against the tool's schema.
func (t Tool) arguments(input json.RawMessage) (map[string]any, error) {
	input = bytes.TrimSpace(input)
	if (len(input) == 0 || string(input) == "null") && t.kind != kindTool {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "mcp %s: %s: input must be %s", t.srv.name, t.remote, t.shape())
	}
	if len(input) == 0 || string(input) == "null" {
		input = json.RawMessage(`{}`)
	}
	var args map[string]any
	if err := json.Unmarshal(input, &args); err != nil || args == nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "mcp tool %s: input must be a JSON object", t.Name)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(input))
	if err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "mcp tool %s: input: %v", t.Name, err)
	}
	if err := t.inSchema.Validate(inst); err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "mcp tool %s: input does not match its schema: %s", t.Name, violations(err))
	}
	return args, nil
}

// shape says what a capability tool's input looks like.
func (t Tool) shape() string {
	if t.kind == kindPrompt {
		return `{"name": string, "arguments"?: {string: string}}`
	}
	return `{"uri": string}`
}

// violations lists the first few violations of a validation error, such as
// "at '/a': got string, want number".
func violations(err error) string {
	lines := strings.Split(err.Error(), "\n")
	var out []string
	for _, l := range lines[1:] {
		if l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "- ")); l != "" {
			out = append(out, l)
		}
	}
	if len(out) == 0 {
		return lines[0]
	}
	if len(out) > 3 {
		out = append(out[:3], "…")
	}
	return clean(strings.Join(out, "; "), 512, true)
}

// fail classifies a failed connect or call.
func (t Tool) fail(ctx context.Context, err error, what string) *contracts.Error {
	prefix := fmt.Sprintf("mcp %s: %s %s: ", t.srv.name, what, t.remote)
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &contracts.Error{Code: contracts.CodeTimeout, Message: prefix + "timed out", Retryable: true}
	case ctx.Err() != nil:
		return &contracts.Error{Code: contracts.CodeCancelled, Message: prefix + "cancelled"}
	}
	var werr *jsonrpc.Error
	if !errors.Is(err, sdk.ErrConnectionClosed) && errors.As(err, &werr) {
		switch werr.Code {
		case jsonrpc.CodeInvalidParams, codeLegacyResourceNotFound:
			// Bad arguments, and (MCP since SEP-2164, and before it
			// -32002) an unknown resource or prompt.
			return &contracts.Error{Code: contracts.CodeInvalidInput, Message: prefix + clean(werr.Message, 512, true) + t.what(werr)}
		case -32003, -32004, -32005: // client or server closing, rejected by the transport
		default:
			return &contracts.Error{Code: contracts.CodeProviderError, Message: prefix + clean(werr.Message, 512, true)}
		}
	}
	return &contracts.Error{Code: contracts.CodeProviderUnavailable, Message: prefix + clean(err.Error(), 512, true), Retryable: true}
}

// codeLegacyResourceNotFound is the "resource not found" of servers older
// than SEP-2164 (which made it invalid params).
const codeLegacyResourceNotFound = -32002

// what names the resource or prompt a refusal was about, as the server's
// error data says ("" when it says nothing usable).
func (t Tool) what(werr *jsonrpc.Error) string {
	if t.kind != kindResource || len(werr.Data) == 0 {
		return ""
	}
	var d struct {
		URI string `json:"uri"`
	}
	if json.Unmarshal(werr.Data, &d) != nil || d.URI == "" {
		return ""
	}
	return " (" + clean(d.URI, 256, true) + ")"
}

// toResult turns the SDK's result into the McpToolResult.
func toResult(res *sdk.CallToolResult) (json.RawMessage, error) {
	out := Result{Content: make([]json.RawMessage, 0, len(res.Content)), IsError: res.IsError}
	for _, c := range res.Content {
		b, err := json.Marshal(c)
		if err != nil {
			return nil, err
		}
		out.Content = append(out.Content, b)
	}
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return nil, err
		}
		out.StructuredContent = b
	}
	return json.Marshal(out)
}
