package cli

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
)

func TestSelectPacks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		tools      []string
		noCM, noEx bool
		mcp        string
		want       []string
		err        string
	}{
		{name: "default: every pack", want: []string{packCodeExecution, packCodeMode, packExec}},
		{name: "default with MCP", mcp: "m.json", want: []string{packCodeExecution, packCodeMode, packExec, packMCP}},
		{name: "default, switched off", noCM: true, noEx: true, want: []string{packCodeExecution}},
		{name: "exactly code mode", tools: []string{"code_mode"}, want: []string{packCodeMode}},
		{name: "exactly exec, spaced", tools: []string{" exec "}, want: []string{packExec}},
		{name: "two", tools: []string{"code_execution", "mcp"}, mcp: "m.json", want: []string{packCodeExecution, packMCP}},
		{name: "unknown", tools: []string{"code-mode"}, err: `unknown tool pack "code-mode"`},
		{name: "named and off", tools: []string{"code_mode"}, noCM: true, err: "--no-code-mode"},
		{name: "exec named and off", tools: []string{"exec"}, noEx: true, err: "--no-exec"},
		{name: "mcp without config", tools: []string{"mcp"}, err: "needs --mcp-config"},
		{name: "config without mcp", tools: []string{"exec"}, mcp: "m.json", err: "does not name mcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			set, err := selectPacks(tc.tools, tc.noCM, tc.noEx, tc.mcp)
			if tc.err != "" {
				require.ErrorIs(t, err, contracts.ErrInvalidInput)
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			var got []string
			for _, p := range toolPacks {
				if set[p] {
					got = append(got, p)
				}
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// TestWorkerServesExactlyItsTools: a worker started with --tools consumes
// the tools of those packs and no other — code_execution included, which
// every worker served before.
func TestWorkerServesExactlyItsTools(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"), 0o600))
	g := &globals{prefix: contracts.DefaultPrefix, log: slog.New(slog.DiscardHandler), stdout: io.Discard, stderr: io.Discard}
	for _, tc := range []struct {
		tools      []string
		want, none []string
	}{
		{tools: []string{"code_mode"}, want: []string{contracts.ToolCodeModeExec, contracts.ToolCodeModeWait, contracts.ToolCodeModeResult}, none: []string{"code_execution", "exec"}},
		{tools: []string{"exec"}, want: []string{"exec"}, none: []string{"code_execution", contracts.ToolCodeModeExec}},
		{tools: []string{"code_execution"}, want: []string{"code_execution"}, none: []string{"exec", contracts.ToolCodeModeExec}},
	} {
		n, err := newNode(testutil.Context(t, 30*time.Second), g, srv.Connect(t), &workerFlags{
			concurrency: 1, replicas: 1, stopTimeout: time.Second, snapshotKeyFile: keyFile, tools: tc.tools,
		})
		require.NoError(t, err)
		got := n.w.Tools()
		for _, tool := range tc.want {
			require.Contains(t, got, tool, "%v", tc.tools)
		}
		for _, tool := range tc.none {
			require.False(t, slices.Contains(got, tool), "%v serves %s: %v", tc.tools, tool, got)
		}
		require.NoError(t, n.close(testutil.Context(t, 10*time.Second), nil))
	}
}
