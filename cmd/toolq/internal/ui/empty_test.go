package ui

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/internal/testutil"
)

// TestEmptyBus: the console starts on a bus no worker has set up yet, and
// its pages say there is nothing rather than fail.
func TestEmptyBus(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	con, err := New(srv.Connect(t), &Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, con.Start(testutil.Context(t, 10*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, con.Stop(ctx))
	})
	for _, p := range []string{"jobs", "runs", "approvals", "dlq", "schedules", "breakers"} {
		resp := get(t, con.URL()+p)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", p, body(t, resp))
	}
}
