package contracts_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

func TestToolNames(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{
		contracts.ToolNoop, contracts.ToolSleep, contracts.ToolExec, contracts.ToolExecDecide,
		contracts.ToolCodeExecution, contracts.ToolCodeModeExec, contracts.ToolCodeModeWait,
		contracts.ToolCodeModeResult, contracts.MCPTool("github", "create_issue"),
	} {
		require.True(t, contracts.ValidTool(tool), tool)
	}
	require.Equal(t, "mcp.github.create_issue", contracts.MCPTool("github", "create_issue"))
	require.True(t, contracts.IsCodeModeTool(contracts.ToolCodeModeWait))
	require.False(t, contracts.IsCodeModeTool(contracts.ToolExec))
}

func TestToolWireNames(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(contracts.MCPToolResult{
		Content:           []json.RawMessage{json.RawMessage(`{"type":"text","text":"hi"}`)},
		StructuredContent: json.RawMessage(`{"n":1}`), IsError: true,
	})
	require.NoError(t, err)
	require.JSONEq(t, `{"content":[{"type":"text","text":"hi"}],"structuredContent":{"n":1},"isError":true}`, string(b))
	b, err = json.Marshal(contracts.SleepInput{Ms: 5})
	require.NoError(t, err)
	require.JSONEq(t, `{"ms":5}`, string(b))
}
