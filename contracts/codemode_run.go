package contracts

import (
	"encoding/json"
	"strings"
)

// Languages of a code-mode exec.
const (
	CodeModeJavaScript = "javascript"
	CodeModeTypeScript = "typescript"
)

// CodeModeExecInput is the input of a code_mode.exec job: the code-mode
// contract's exec input ({code, language}) and the bus's options.
type CodeModeExecInput struct {
	// Code is the body of an async function (top-level await and return
	// work). Command is its alias; when both are set they must agree.
	Code    string `json:"code,omitempty"`
	Command string `json:"command,omitempty"`
	// Language is CodeModeJavaScript (the default) or CodeModeTypeScript.
	Language string `json:"language,omitempty"`
	// Tools narrows the run's catalog to these catalog ids; an explicit
	// empty list allows nothing.
	Tools []string `json:"tools,omitempty"`
	// Limits override the worker's defaults, up to its maximums.
	Limits *CodeModeExecLimits `json:"limits,omitempty"`
	// RestartSafe refuses side-effecting tools.
	RestartSafe bool `json:"restartSafe,omitempty"`
	// AutoResume resumes the run as soon as its nested calls are back,
	// without a code_mode.wait.
	AutoResume bool `json:"autoResume,omitempty"`
}

// MarshalJSON writes an explicit empty Tools list as "tools": [] (a run
// that may call no tool), which omitempty alone would drop (a run that may
// call every tool the worker allows).
func (in CodeModeExecInput) MarshalJSON() ([]byte, error) {
	type plain CodeModeExecInput
	if in.Tools == nil || len(in.Tools) > 0 {
		return json.Marshal(plain(in))
	}
	return json.Marshal(struct {
		plain
		Tools []string `json:"tools"`
	}{plain(in), []string{}})
}

// MaxCatalogIDBytes bounds a catalog id in CodeModeExecInput.Tools.
const MaxCatalogIDBytes = 400

// Script returns the source to run and its language, as the code-mode
// contract reads an exec input: one of code and command is non-empty, both
// agree when both are given, and the language is javascript (the default)
// or typescript. Its errors are *Error with code invalid_input.
func (in *CodeModeExecInput) Script() (source, language string, err error) {
	code, command := in.Code, in.Command
	switch {
	case strings.TrimSpace(code) == "" && strings.TrimSpace(command) == "":
		return "", "", Errorf(CodeInvalidInput, "exec needs code (or its alias command)")
	case code != "" && command != "" && code != command:
		return "", "", Errorf(CodeInvalidInput, "code and command are both set and differ")
	}
	source = code
	if strings.TrimSpace(source) == "" {
		source = command
	}
	language = in.Language
	switch language {
	case "":
		language = CodeModeJavaScript
	case CodeModeJavaScript, CodeModeTypeScript:
	default:
		return "", "", Errorf(CodeInvalidInput,
			"language must be %q or %q, not %q", CodeModeJavaScript, CodeModeTypeScript, language)
	}
	return source, language, nil
}

// Validate checks what can be checked without a worker: the script and its
// language, the tool ids, and that no limit is negative. A worker also
// refuses limits above its own maximums. Its errors are *Error with code
// invalid_input.
func (in *CodeModeExecInput) Validate() error {
	if _, _, err := in.Script(); err != nil {
		return err
	}
	for _, id := range in.Tools {
		if id == "" || len(id) > MaxCatalogIDBytes {
			return Errorf(CodeInvalidInput, "tools: ids must be non-empty catalog ids")
		}
	}
	if l := in.Limits; l != nil {
		if l.TimeoutMs < 0 || l.MemoryLimitBytes < 0 || l.MaxOutputBytes < 0 || l.MaxSnapshotBytes < 0 ||
			l.MaxPendingToolCalls < 0 || l.SearchDefaultLimit < 0 || l.MaxSearchLimit < 0 || l.SnapshotTTLSeconds < 0 ||
			l.MaxOutputItems < 0 || l.MaxTotalCPUMs < 0 {
			return Errorf(CodeInvalidInput, "limits must not be negative")
		}
	}
	return nil
}

// CodeModeLimits bound one run. Zero fields take the worker's defaults.
// JSON names follow the code-mode contract's tools.codeMode settings.
type CodeModeLimits struct {
	TimeoutMs           int   `json:"timeoutMs,omitempty"`
	MemoryLimitBytes    int64 `json:"memoryLimitBytes,omitempty"`
	MaxOutputBytes      int   `json:"maxOutputBytes,omitempty"`
	MaxSnapshotBytes    int   `json:"maxSnapshotBytes,omitempty"`
	MaxPendingToolCalls int   `json:"maxPendingToolCalls,omitempty"`
	SearchDefaultLimit  int   `json:"searchDefaultLimit,omitempty"`
	MaxSearchLimit      int   `json:"maxSearchLimit,omitempty"`
	// MaxOutputItems caps the number of text()/json() items of a run, so
	// that empty items are not free; maxOutputBytes caps their size, and
	// every item counts CodeModeOutputItemBytes against it besides its
	// content.
	MaxOutputItems int `json:"maxOutputItems,omitempty"`
	// MaxTotalCPUMs caps the time a run spends running, summed over exec
	// and every resume; timeoutMs bounds one slice. Exceeding it fails the
	// run with timeout.
	MaxTotalCPUMs int `json:"maxTotalCpuMs,omitempty"`
}

// CodeModeOutputItemBytes is what each output item costs against
// maxOutputBytes besides its text or value: about the JSON around it.
const CodeModeOutputItemBytes = 16

// CodeModeMaxErrorBytes caps the error text of a failed run (a guest
// error's name and message, or a host error): a longer one is cut, so a
// huge thrown message cannot make the result larger than a message.
const CodeModeMaxErrorBytes = 4096

// DefaultCodeModeLimits returns the code-mode contract's defaults.
func DefaultCodeModeLimits() CodeModeLimits {
	return CodeModeLimits{
		TimeoutMs:           10000,
		MemoryLimitBytes:    64 << 20,
		MaxOutputBytes:      64 << 10,
		MaxSnapshotBytes:    10 << 20,
		MaxPendingToolCalls: 16,
		SearchDefaultLimit:  8,
		MaxSearchLimit:      50,
		MaxOutputItems:      1000,
		MaxTotalCPUMs:       60000,
	}
}

// CodeModeExecLimits are a run's limits as a code_mode.exec job gives them:
// the engine's limits and how long a waiting run lives.
type CodeModeExecLimits struct {
	CodeModeLimits
	// SnapshotTTLSeconds is how long the run may stay suspended; the
	// worker's default (900 s) when zero.
	SnapshotTTLSeconds int64 `json:"snapshotTtlSeconds,omitempty"`
}

// CodeModeWaitInput is the input of a code_mode.wait job.
type CodeModeWaitInput struct {
	RunID string `json:"runId"`
}

// CodeModeStatus is the status of a CodeModeResult.
type CodeModeStatus string

// CodeModeResult statuses.
const (
	CodeModeCompleted CodeModeStatus = "completed"
	CodeModeWaiting   CodeModeStatus = "waiting"
	CodeModeFailed    CodeModeStatus = "failed"
)

// Reasons of a waiting CodeModeResult.
const (
	// CodeModeReasonPendingTools: the guest awaits nested tool calls.
	CodeModeReasonPendingTools = "pending_tools"
	// CodeModeReasonYield: the guest called yield_control().
	CodeModeReasonYield = "yield"
)

// CodeModeResult is the result of code_mode.exec and code_mode.wait jobs,
// the contract's CodeModeResult: completed {value, output, telemetry},
// waiting {runId, reason, pendingToolCalls, output, telemetry} or failed
// {error, code, output, telemetry}. A completed or waiting result is the
// job's result; a failed one is the Details of the job's error.
type CodeModeResult struct {
	Status           CodeModeStatus            `json:"status"`
	Value            json.RawMessage           `json:"value,omitempty"`
	RunID            string                    `json:"runId,omitempty"`
	Reason           string                    `json:"reason,omitempty"`
	PendingToolCalls []CodeModePendingToolCall `json:"pendingToolCalls,omitempty"`
	Error            string                    `json:"error,omitempty"`
	Code             ErrorCode                 `json:"code,omitempty"`
	Output           []CodeModeOutput          `json:"output,omitempty"`
	Telemetry        CodeModeTelemetry         `json:"telemetry"`
}

// MarshalJSON writes value: null for a completed run that returned nothing.
func (r CodeModeResult) MarshalJSON() ([]byte, error) {
	type plain CodeModeResult
	if r.Status == CodeModeCompleted && len(r.Value) == 0 {
		r.Value = json.RawMessage("null")
	}
	return json.Marshal(plain(r))
}

// Err returns nil unless the run failed, and then the failure as an *Error
// with the result's code (internal_error when it has none) and message, so
// errors.Is(r.Err(), ErrTimeout) works.
func (r *CodeModeResult) Err() error {
	if r.Status != CodeModeFailed {
		return nil
	}
	code := r.Code
	if code == "" {
		code = CodeInternalError
	}
	return &Error{Code: code, Message: r.Error}
}

// CodeModeOutput is one item of a run's output: {type:"text", text} or
// {type:"json", value}.
type CodeModeOutput struct {
	Type  string          `json:"type"`
	Text  string          `json:"text,omitempty"`
	Value json.RawMessage `json:"value,omitempty"`
}

// CodeModeOutput types.
const (
	CodeModeOutputText = "text"
	CodeModeOutputJSON = "json"
)

// CodeModeTelemetry counts what a run did, over exec and every resume.
type CodeModeTelemetry struct {
	BridgeCalls   CodeModeBridgeCalls `json:"bridgeCalls"`
	NestedCalls   int                 `json:"nestedCalls"`
	Resumes       int                 `json:"resumes"`
	DurationMs    float64             `json:"durationMs"`
	SnapshotBytes int                 `json:"snapshotBytes,omitempty"`
	// SuspendedMs is the time the run spent suspended between slices
	// (DurationMs is the time running).
	SuspendedMs float64 `json:"suspendedMs,omitempty"`
}

// CodeModeBridgeCalls counts calls through the host bridge.
type CodeModeBridgeCalls struct {
	Search   int `json:"search"`
	Describe int `json:"describe"`
	Call     int `json:"call"`
}

// CodeModePendingToolCall is a nested tool call the guest awaits. Calls of
// Source SourceClient are the requester's to answer (see ToolResult).
type CodeModePendingToolCall struct {
	CallID string          `json:"callId"`
	ToolID string          `json:"toolId"`
	Source string          `json:"source,omitempty"`
	Input  json.RawMessage `json:"input"`
	// Token is set on calls of Source SourceClient: the answer must echo
	// it (ToolResult.Token). Calls that workers run keep theirs inside
	// the bus.
	Token string `json:"token,omitempty"`
}
