package contracts_test

import (
	"encoding/json"
	"testing"
	"time"

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

func TestCatalogToolTTL(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		tool    contracts.CatalogTool
		ttl     time.Duration
		expired time.Duration // the age at which it is expired; 0: never
	}{
		{"worker without ttl", contracts.CatalogTool{Source: contracts.SourceToolq}, 0, 0},
		{"worker", contracts.CatalogTool{Source: contracts.SourceToolq, TTLSeconds: 90}, 90 * time.Second, 90 * time.Second},
		{"mcp", contracts.CatalogTool{Source: contracts.SourceMCP, TTLSeconds: 3}, 3 * time.Second, 3 * time.Second},
		{"client default", contracts.CatalogTool{Source: contracts.SourceClient}, contracts.DefaultClientToolTTL, contracts.DefaultClientToolTTL},
		{"client own", contracts.CatalogTool{Source: contracts.SourceClient, TTLSeconds: 1}, time.Second, time.Second},
		{"client capped", contracts.CatalogTool{Source: contracts.SourceClient, TTLSeconds: 1 << 30}, contracts.MaxClientToolTTL, contracts.MaxClientToolTTL},
		{"negative", contracts.CatalogTool{Source: contracts.SourceClient, TTLSeconds: -5}, contracts.DefaultClientToolTTL, contracts.DefaultClientToolTTL},
	} {
		require.Equal(t, c.ttl, c.tool.TTL(), c.name)
		if c.expired == 0 {
			require.False(t, c.tool.Expired(at, at.Add(100*365*24*time.Hour)), c.name)
			continue
		}
		require.False(t, c.tool.Expired(at, at.Add(c.expired-time.Millisecond)), c.name)
		require.True(t, c.tool.Expired(at, at.Add(c.expired)), c.name)
	}
}
