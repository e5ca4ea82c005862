package contracts_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

func TestCodeModeResultErr(t *testing.T) {
	t.Parallel()
	require.NoError(t, (&contracts.CodeModeResult{Status: contracts.CodeModeCompleted}).Err())
	require.NoError(t, (&contracts.CodeModeResult{Status: contracts.CodeModeWaiting}).Err())
	err := (&contracts.CodeModeResult{Status: contracts.CodeModeFailed, Code: contracts.CodeTimeout, Error: "slow"}).Err()
	require.ErrorIs(t, err, contracts.ErrTimeout)
	require.EqualError(t, err, "timeout: slow")
	require.ErrorIs(t, (&contracts.CodeModeResult{Status: contracts.CodeModeFailed}).Err(), contracts.ErrGuestError)
}

func TestCodeModeExecInputValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		in       contracts.CodeModeExecInput
		wantErr  string
		wantLang string
	}{
		{name: "code", in: contracts.CodeModeExecInput{Code: "return 1"}, wantLang: "javascript"},
		{name: "command alias", in: contracts.CodeModeExecInput{Command: "return 1", Language: "typescript"}, wantLang: "typescript"},
		{name: "both agree", in: contracts.CodeModeExecInput{Code: "1", Command: "1"}, wantLang: "javascript"},
		{name: "empty", in: contracts.CodeModeExecInput{Code: "  "}, wantErr: "exec needs code"},
		{name: "both differ", in: contracts.CodeModeExecInput{Code: "1", Command: "2"}, wantErr: "both set and differ"},
		{name: "python", in: contracts.CodeModeExecInput{Code: "1", Language: "python"}, wantErr: "language must be"},
		{name: "empty tool id", in: contracts.CodeModeExecInput{Code: "1", Tools: []string{""}}, wantErr: "catalog ids"},
		{name: "long tool id", in: contracts.CodeModeExecInput{Code: "1", Tools: []string{strings.Repeat("a", contracts.MaxCatalogIDBytes+1)}}, wantErr: "catalog ids"},
		{name: "negative limit", in: contracts.CodeModeExecInput{Code: "1", Limits: &contracts.CodeModeExecLimits{
			CodeModeLimits: contracts.CodeModeLimits{MaxOutputBytes: -1},
		}}, wantErr: "negative"},
		{name: "negative ttl", in: contracts.CodeModeExecInput{Code: "1", Limits: &contracts.CodeModeExecLimits{SnapshotTTLSeconds: -1}}, wantErr: "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.in.Validate()
			if tc.wantErr != "" {
				require.ErrorIs(t, err, contracts.ErrInvalidInput)
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			_, lang, err := tc.in.Script()
			require.NoError(t, err)
			require.Equal(t, tc.wantLang, lang)
		})
	}
}

// TestCodeModeWireNames pins the JSON names of the code-mode types, which
// requesters in other languages read.
func TestCodeModeWireNames(t *testing.T) {
	t.Parallel()
	in := contracts.CodeModeExecInput{
		Code: "c", Command: "c", Language: contracts.CodeModeTypeScript, Tools: []string{"toolq:core:noop"},
		Limits: &contracts.CodeModeExecLimits{
			CodeModeLimits: contracts.CodeModeLimits{
				TimeoutMs: 1, MemoryLimitBytes: 2, MaxOutputBytes: 3, MaxSnapshotBytes: 4,
				MaxPendingToolCalls: 5, SearchDefaultLimit: 6, MaxSearchLimit: 7,
			},
			SnapshotTTLSeconds: 8,
		},
		RestartSafe: true, AutoResume: true,
	}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	require.JSONEq(t, `{"code":"c","command":"c","language":"typescript","tools":["toolq:core:noop"],
		"limits":{"timeoutMs":1,"memoryLimitBytes":2,"maxOutputBytes":3,"maxSnapshotBytes":4,
		"maxPendingToolCalls":5,"searchDefaultLimit":6,"maxSearchLimit":7,"snapshotTtlSeconds":8},
		"restartSafe":true,"autoResume":true}`, string(b))

	res := contracts.CodeModeResult{
		Status: contracts.CodeModeWaiting, RunID: "r1", Reason: contracts.CodeModeReasonPendingTools,
		PendingToolCalls: []contracts.CodeModePendingToolCall{{CallID: "c1", ToolID: "client:me:ask", Source: contracts.SourceClient, Input: json.RawMessage(`{"q":1}`)}},
		Output:           []contracts.CodeModeOutput{{Type: contracts.CodeModeOutputText, Text: "hi"}, {Type: contracts.CodeModeOutputJSON, Value: json.RawMessage(`[1]`)}},
		Telemetry: contracts.CodeModeTelemetry{
			BridgeCalls: contracts.CodeModeBridgeCalls{Search: 1, Describe: 2, Call: 3},
			NestedCalls: 3, Resumes: 1, DurationMs: 1.5, SnapshotBytes: 100, SuspendedMs: 2.5,
		},
	}
	b, err = json.Marshal(res)
	require.NoError(t, err)
	require.JSONEq(t, `{"status":"waiting","runId":"r1","reason":"pending_tools",
		"pendingToolCalls":[{"callId":"c1","toolId":"client:me:ask","source":"client","input":{"q":1}}],
		"output":[{"type":"text","text":"hi"},{"type":"json","value":[1]}],
		"telemetry":{"bridgeCalls":{"search":1,"describe":2,"call":3},"nestedCalls":3,"resumes":1,
		"durationMs":1.5,"snapshotBytes":100,"suspendedMs":2.5}}`, string(b))

	// A completed run that returned nothing has value null, by value and by pointer.
	done := contracts.CodeModeResult{Status: contracts.CodeModeCompleted}
	for _, v := range []any{done, &done} {
		b, err = json.Marshal(v)
		require.NoError(t, err)
		require.JSONEq(t, `{"status":"completed","value":null,"telemetry":{"bridgeCalls":{"search":0,"describe":0,"call":0},"nestedCalls":0,"resumes":0,"durationMs":0}}`, string(b))
	}
	var back contracts.CodeModeResult
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, contracts.CodeModeCompleted, back.Status)
	require.JSONEq(t, `null`, string(back.Value))

	// An explicit empty tool list survives encoding: it allows no tool,
	// while a nil one allows every tool the worker allows.
	b, err = json.Marshal(contracts.CodeModeExecInput{Code: "1", Tools: []string{}})
	require.NoError(t, err)
	require.JSONEq(t, `{"code":"1","tools":[]}`, string(b))
	var none contracts.CodeModeExecInput
	require.NoError(t, json.Unmarshal(b, &none))
	require.NotNil(t, none.Tools)
	require.Empty(t, none.Tools)
	b, err = json.Marshal(&contracts.CodeModeExecInput{Code: "1"})
	require.NoError(t, err)
	require.JSONEq(t, `{"code":"1"}`, string(b))

	b, err = json.Marshal(contracts.CodeModeWaitInput{RunID: "r1"})
	require.NoError(t, err)
	require.JSONEq(t, `{"runId":"r1"}`, string(b))
}
