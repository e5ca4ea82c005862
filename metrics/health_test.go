package metrics_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/metrics"
)

// /healthz answers while the process serves; /readyz only once the command
// set a passing check, and no longer once it set a failing one.
func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	srv, err := metrics.Listen("127.0.0.1:0", prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	base := srv.URL()[:len(srv.URL())-len("/metrics")]
	get := func(path string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, _ := get("/healthz")
	require.Equal(t, http.StatusOK, code)
	code, body := get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "starting")

	var down error
	srv.SetReady(func() error { return down })
	code, _ = get("/readyz")
	require.Equal(t, http.StatusOK, code)
	down = errors.New("nats connection RECONNECTING")
	code, body = get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "RECONNECTING")
	code, _ = get("/healthz")
	require.Equal(t, http.StatusOK, code, "not ready is still alive")
}
