package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/tools/codeexec/demo"
)

// startDev runs `toolq dev ARGS` until the test ends and returns the URL
// of its bus, read from its banner, once its self-check is done.
func startDev(t *testing.T, args ...string) (url string, stderr *testutil.LockedBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr = &testutil.LockedBuffer{}
	root, _ := newRoot(&testutil.LockedBuffer{}, stderr)
	root.SetIn(strings.NewReader(""))
	root.SetArgs(append([]string{"dev", "--listen", "127.0.0.1:-1", "--data", t.TempDir(), "--log-level", "warn"}, args...))
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done, stderr.String())
	})
	banner := regexp.MustCompile(`export TOOLQ_NATS=(\S+)`)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := banner.FindStringSubmatch(stderr.String()); m != nil && strings.Contains(stderr.String(), "self-check code-mode run") {
			return m[1], stderr
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("dev ended before its banner: %v\n%s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "no banner from dev:\n%s", stderr.String())
	}
}

// readmeLine returns the README's line that matches re, split into
// arguments after "bin/toolq", its comment dropped.
func readmeLine(t *testing.T, re string) []string {
	t.Helper()
	for _, line := range strings.Split(string(readFile(t, "README.md")), "\n") {
		if !regexp.MustCompile(re).MatchString(line) {
			continue
		}
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		require.Equal(t, "bin/toolq", f[0], line)
		return f[1:]
	}
	t.Fatalf("README.md has no line matching %s", re)
	return nil
}

// TestReadmeDemoProviderRunsCodeExecution: the README's two lines, dev with
// the demo provider and the code_execution submit, as written (the submit
// run from the repository root's files): the job completes through the
// real xai client and the embedded demo server, and its result says no
// model was called.
func TestReadmeDemoProviderRunsCodeExecution(t *testing.T) { //nolint:paralleltest // clears the provider keys with t.Setenv: the demo provider must not need one
	for _, k := range []string{"XAI_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "ANTHROPIC_API_KEY"} {
		t.Setenv(k, "")
	}
	dev := readmeLine(t, `^bin/toolq dev .*--demo-provider`)
	require.Equal(t, []string{"dev", "--demo-provider"}, dev)
	url, devErr := startDev(t, dev[1:]...)
	require.Contains(t, devErr.String(), "no model is called")

	submit := readmeLine(t, `^bin/toolq submit --tool code_execution `)
	var file string
	for i, a := range submit {
		if strings.HasPrefix(a, "@") {
			file = a[1:]
			submit[i] = "@" + filepath.Join(repoRoot, file)
		}
	}
	require.Equal(t, "examples/code_execution/task.json", file)
	code, out, errOut := run(t, append([]string{"--nats", url}, submit...)...)
	require.Equal(t, 0, code, errOut+devErr.String())
	var ev contracts.Event
	require.NoError(t, json.Unmarshal([]byte(out), &ev))
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	var d contracts.CodeExecutionDetails
	require.NoError(t, json.Unmarshal(ev.Data.Result, &d))
	require.True(t, strings.HasPrefix(d.Content, demo.Label), d.Content)
	in, err := contracts.DecodeCodeExecutionInput(readFile(t, file))
	require.NoError(t, err)
	require.Contains(t, d.Content, in.Task)
	require.Equal(t, "xai", d.Provider)
	require.Empty(t, d.Failover)
	require.Len(t, d.Runs, 1)
	require.Equal(t, in.Task+"\n", d.Runs[0].Output)
	require.NotNil(t, d.Usage.CostUSD)
	require.Zero(t, *d.Usage.CostUSD)
}

// TestDevWithoutDemoProviderNeedsAKey: without the flag, dev's
// code_execution still needs a key; the demo provider is off unless asked.
func TestDevWithoutDemoProviderNeedsAKey(t *testing.T) { //nolint:paralleltest // clears the provider keys with t.Setenv
	for _, k := range []string{"XAI_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "ANTHROPIC_API_KEY"} {
		t.Setenv(k, "")
	}
	url, devErr := startDev(t)
	require.NotContains(t, devErr.String(), "demo provider")
	code, out, _ := run(t, "--nats", url, "submit", "--tool", "code_execution", "--input", `{"task":"t"}`, "--wait")
	require.Equal(t, 1, code)
	var ev contracts.Event
	require.NoError(t, json.Unmarshal([]byte(out), &ev))
	require.Equal(t, contracts.CodeMissingCredentials, ev.Data.Error.Code)
}

// TestDemoProviderExcludesProvidersConfig: the two flags together are a
// bad command line, not a silent choice of one.
func TestDemoProviderExcludesProvidersConfig(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "p.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{}`), 0o600))
	code, _, errOut := run(t, "dev", "--once", "--listen", "127.0.0.1:-1", "--data", t.TempDir(), "--demo-provider", "--providers-config", cfg)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "exclude each other")
}
