package contracts_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// TestCodeModeExecInputSchemaAgreesWithValidate checks the schema the
// model-facing definitions are made of against the decoder and Validate
// the workers run: what a worker accepts passes the schema, and what the
// schema refuses a worker refuses too. The two inputs only Validate can
// refuse are listed as such.
func TestCodeModeExecInputSchemaAgreesWithValidate(t *testing.T) {
	t.Parallel()
	sch, _ := compileSchema(t, contracts.CodeModeExecInputSchema())
	for _, tc := range []struct {
		in            string
		worker, model bool // accepted by the worker, by the schema
	}{
		{`{"code":"return 1"}`, true, true},
		{`{"command":"return 1"}`, true, true},
		{`{"code":"return 1","command":"return 1"}`, true, true},
		{`{"code":"let x: number = 1; return x","language":"typescript"}`, true, true},
		{`{"code":"1","language":"javascript","tools":[],"restartSafe":true,"autoResume":true}`, true, true},
		{`{"code":"1","tools":["toolq:core:noop"],"limits":{"timeoutMs":5,"snapshotTtlSeconds":60}}`, true, true},
		{`{"code":"1","later":"a field of a newer producer"}`, true, true},
		{`{"code":"1","language":"python"}`, false, false},
		{`{"code":"1","tools":[""]}`, false, false},
		{`{"code":"1","limits":{"timeoutMs":-1}}`, false, false},
		{`{"code":"1","limits":{"snapshotTtlSeconds":-1}}`, false, false},
		{`{"code":5}`, false, false},
		{`{"code":"1","tools":"toolq:core:noop"}`, false, false},
		{`{"code":"1","restartSafe":"yes"}`, false, false},
		// Only a worker can tell: the schema has no top-level anyOf
		// (providers refuse one) and cannot compare two fields.
		{`{}`, false, true},
		{`{"code":"a","command":"b"}`, false, true},
	} {
		var in contracts.CodeModeExecInput
		err := json.Unmarshal([]byte(tc.in), &in)
		if err == nil {
			err = in.Validate()
		}
		require.Equal(t, tc.worker, err == nil, "worker on %s: %v", tc.in, err)
		err = validate(sch, []byte(tc.in))
		require.Equal(t, tc.model, err == nil, "schema on %s: %v", tc.in, err)
	}
}

func TestCodeModeWaitInputSchema(t *testing.T) {
	t.Parallel()
	sch, _ := compileSchema(t, contracts.CodeModeWaitInputSchema())
	for in, ok := range map[string]bool{
		`{"runId":"run-1"}`:   true,
		`{}`:                  false,
		`{"runId":""}`:        false,
		`{"runId":"a.b"}`:     false,
		`{"runId":"a b"}`:     false,
		`{"runId":1}`:         false,
		`{"runId":"x","n":1}`: true,
	} {
		var w contracts.CodeModeWaitInput
		worker := json.Unmarshal([]byte(in), &w) == nil && contracts.ValidID(w.RunID)
		require.Equal(t, ok, worker, in)
		require.Equal(t, ok, validate(sch, []byte(in)) == nil, in)
	}
}

// TestCodeModeResultSchema checks that every shape of result a worker
// writes passes the schema the definitions describe results with.
func TestCodeModeResultSchema(t *testing.T) {
	t.Parallel()
	sch, _ := compileSchema(t, contracts.CodeModeResultSchema())
	for _, r := range []contracts.CodeModeResult{
		{Status: contracts.CodeModeCompleted},
		{
			Status: contracts.CodeModeCompleted, Value: json.RawMessage(`{"a":[1,2]}`),
			Output: []contracts.CodeModeOutput{{Type: "text", Text: "hi"}, {Type: "json", Value: json.RawMessage(`3`)}},
		},
		{
			Status: contracts.CodeModeWaiting, RunID: "r1", Reason: contracts.CodeModeReasonPendingTools,
			PendingToolCalls: []contracts.CodeModePendingToolCall{{CallID: "c1", ToolID: "client:app:pick", Source: "client", Input: json.RawMessage(`{}`), Token: "tok"}},
		},
		{Status: contracts.CodeModeWaiting, RunID: "r1", Reason: contracts.CodeModeReasonYield},
		{
			Status: contracts.CodeModeFailed, Error: "boom", Code: contracts.CodeTimeout,
			Telemetry: contracts.CodeModeTelemetry{NestedCalls: 1, DurationMs: 1.5, BridgeCalls: contracts.CodeModeBridgeCalls{Call: 1}},
		},
	} {
		data, err := json.Marshal(r)
		require.NoError(t, err)
		require.NoError(t, validate(sch, data), string(data))
	}
	for _, bad := range []string{`{"status":"done","telemetry":{}}`, `{"status":"completed"}`, `{"status":"waiting","reason":"bored","telemetry":{}}`} {
		require.Error(t, validate(sch, []byte(bad)), bad)
	}
}
