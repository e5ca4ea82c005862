package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
)

func TestParseCodeModeLimits(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "limits.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"defaults":{"timeoutMs":1000},"max":{"timeoutMs":5000,"maxTotalCpuMs":60000}}`), 0o600))
	for _, arg := range []string{file, "@" + file} {
		l, err := parseCodeModeLimits(arg)
		require.NoError(t, err)
		require.Equal(t, 1000, l.Defaults.TimeoutMs)
		require.Equal(t, 5000, l.Max.TimeoutMs)
		require.Equal(t, 60000, l.Max.MaxTotalCPUMs)
	}
	for arg, want := range map[string]string{
		`{"defaults":{"timeoutMs":9000},"max":{"timeoutMs":5000}}`: "defaults.timeoutMs 9000 above max.timeoutMs 5000",
		`{"defaults":{"timeout":1000}}`:                            "unknown field",
		`{"max":{"memoryLimitBytes":-1}}`:                          "must not be negative",
		`{"defaults":{}} {}`:                                       "one JSON object",
		"no-such-file.json":                                        "takes inline JSON, @file or a file path",
	} {
		_, err := parseCodeModeLimits(arg)
		require.ErrorIs(t, err, contracts.ErrInvalidInput, arg)
		require.ErrorContains(t, err, want, arg)
	}
}

// TestWorkerCodeModeLimits: with --codemode-limits, a run gets the
// worker's defaults, and a job may ask up to the maximum, not beyond.
func TestWorkerCodeModeLimits(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"), 0o600))
	g := &globals{prefix: contracts.DefaultPrefix, log: slog.New(slog.DiscardHandler), stdout: io.Discard, stderr: io.Discard}
	n, err := newNode(testutil.Context(t, 30*time.Second), g, srv.Connect(t), &workerFlags{
		concurrency: 2, replicas: 1, stopTimeout: time.Second, snapshotKeyFile: keyFile, tools: []string{"code_mode"},
		codeModeLimits: `{"defaults":{"timeoutMs":300},"max":{"timeoutMs":3000}}`,
	})
	require.NoError(t, err)
	require.NoError(t, n.start(testutil.Context(t, 30*time.Second)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, n.stop(ctx))
	})
	submit := func(input string) contracts.Event {
		t.Helper()
		_, out, errOut := run(t, "--nats", srv.ClientURL(), "submit", "--tool", contracts.ToolCodeModeExec, "--input", input, "--wait")
		var ev contracts.Event
		require.NoError(t, json.Unmarshal([]byte(out), &ev), errOut)
		return ev
	}
	busy := `const end = Date.now() + 1000; while (Date.now() < end) {} return "done";`
	code, _ := json.Marshal(busy)
	// The worker's default (300 ms) ends a one-second loop.
	ev := submit(`{"code":` + string(code) + `}`)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeTimeout, ev.Data.Error.Code, ev.Data.Error.Message)
	// Asking for 2 s, within the maximum, lets it finish.
	ev = submit(`{"code":` + string(code) + `,"limits":{"timeoutMs":2000}}`)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "%+v", ev.Data.Error)
	// 5 s is above this worker's maximum.
	ev = submit(`{"code":` + string(code) + `,"limits":{"timeoutMs":5000}}`)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Equal(t, contracts.CodeInvalidInput, ev.Data.Error.Code)
	require.Contains(t, ev.Data.Error.Message, "exceeds this worker's maximum 3000")
}
