package cli

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/internal/testutil"
)

// TestUICommand: toolq ui serves the console on the operator's bus until
// interrupted, and refuses a non-loopback address without a token, and a
// token that is too short.
func TestUICommand(t *testing.T) {
	t.Parallel()
	url := startBus(t)

	ctx, cancel := context.WithCancel(context.Background())
	var out, errb testutil.LockedBuffer
	root, _ := newRoot(&out, &errb)
	root.SetArgs([]string{"--nats", url, "ui", "--listen", "127.0.0.1:0", "--log-level", "warn"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, errb.String())
		case <-time.After(20 * time.Second):
			t.Error("ui did not stop on interrupt")
		}
	})
	re := regexp.MustCompile(`toolq ui: web console at (http://127\.0\.0\.1:\d+/)`)
	var consoleURL string
	require.Eventually(t, func() bool {
		m := re.FindStringSubmatch(errb.String())
		if m != nil {
			consoleURL = m[1]
		}
		return m != nil
	}, 10*time.Second, 20*time.Millisecond, "the console's URL is printed")
	req, err := http.NewRequestWithContext(testutil.Context(t, 10*time.Second), http.MethodGet, consoleURL+"jobs", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(page), "<h1>Jobs</h1>")

	code, _, errOut := run(t, "--nats", url, "ui", "--listen", "0.0.0.0:0")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "not a loopback address")
	short := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(short, []byte("short\n"), 0o600))
	code, _, errOut = run(t, "--nats", url, "ui", "--listen", "0.0.0.0:0", "--token-file", short)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "at least 16 bytes")
}
