package mcp_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/tools/mcp"
	"github.com/toolq/toolq/worker"
)

// Servers are a worker extension: the worker's Stop ends their sessions
// (a stdio server is stopped) and its next Start lets them take calls
// again.
func TestServersStopAndStartAgain(t *testing.T) {
	t.Parallel()
	var ext worker.Extension = open(t, &mcp.Config{Servers: map[string]mcp.ServerConfig{"local-1": {Command: stdioServer}}})
	s := ext.(*mcp.Servers)
	echo := byName(t, s)["mcp.local-1.echo"]
	_, err := call(t, echo, `{"text":"a"}`)
	require.NoError(t, err)

	require.NoError(t, s.Stop(ctxFor(t)))
	_, err = call(t, echo, `{"text":"a"}`)
	require.Error(t, err, "a stopped server takes no calls")

	require.NoError(t, s.Start(ctxFor(t)))
	res, err := call(t, echo, `{"text":"again"}`)
	require.NoError(t, err)
	require.Equal(t, "again", res["content"].([]any)[0].(map[string]any)["text"])
}
