package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
)

func TestWorkerRunsMCPTools(t *testing.T) {
	t.Parallel()
	s := sdk.NewServer(&sdk.Implementation{Name: "docs", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "lookup", Description: "Look a word up."},
		func(_ context.Context, req *sdk.CallToolRequest, in struct {
			Word string `json:"word"`
		},
		) (*sdk.CallToolResult, any, error) {
			auth := req.Extra.Header.Get("Authorization")
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: in.Word + " (" + auth + ")"}}}, nil, nil
		})
	ts := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	t.Cleanup(ts.Close)
	file := filepath.Join(t.TempDir(), "mcp.json")
	cfg, err := json.Marshal(map[string]any{"servers": map[string]any{"docs": map[string]any{"url": ts.URL, "headers": map[string]string{"Authorization": "Bearer t0k"}}}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, cfg, 0o600))

	srv := testutil.StartJetStream(t)
	g := &globals{prefix: contracts.DefaultPrefix, log: slog.New(slog.DiscardHandler), stdout: io.Discard, stderr: io.Discard}
	n, err := newNode(testutil.Context(t, 30*time.Second), g, srv.Connect(t), &workerFlags{concurrency: 2, replicas: 1, stopTimeout: time.Second, noCodeMode: true, mcpConfig: file})
	require.NoError(t, err)
	require.Contains(t, n.w.Tools(), "mcp.docs.lookup")
	require.NoError(t, n.start(testutil.Context(t, 30*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, n.stop(ctx))
	})

	code, out, errOut := run(t, "--nats", srv.ClientURL(), "submit", "--tool", "mcp.docs.lookup", "--input", `{"word":"queue"}`, "--wait")
	require.Equal(t, 0, code, errOut)
	var ev contracts.Event
	require.NoError(t, json.Unmarshal([]byte(out), &ev))
	require.JSONEq(t, `{"content":[{"type":"text","text":"queue (Bearer t0k)"}]}`, string(ev.Data.Result))

	// A bad configuration stops the worker from starting.
	bad := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"servers":{"docs":{"url":"ftp://x"}}}`), 0o600))
	_, err = newNode(testutil.Context(t, 10*time.Second), g, srv.Connect(t), &workerFlags{concurrency: 1, replicas: 1, stopTimeout: time.Second, noCodeMode: true, mcpConfig: bad})
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
}
