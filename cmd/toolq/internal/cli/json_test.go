package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// requireJSON checks that out is exactly one JSON value and returns it.
func requireJSON(t *testing.T, out string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var v any
	require.NoError(t, dec.Decode(&v), "stdout is not JSON: %q", out)
	require.False(t, dec.More(), "stdout holds more than one JSON value: %q", out)
	m, _ := v.(map[string]any)
	return m
}

// requireJSONError checks that stderr is one line, one JSON object
// {"error":{"code","message"}}, and returns the code.
func requireJSONError(t *testing.T, stderr string) (code, message string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	last := lines[len(lines)-1]
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(last), &e), "stderr's last line is not JSON: %q", stderr)
	require.NotEmpty(t, e.Error.Code, stderr)
	require.NotEmpty(t, e.Error.Message, stderr)
	for _, l := range lines {
		require.True(t, json.Valid([]byte(l)), "stderr line is not JSON: %q", l)
	}
	return e.Error.Code, e.Error.Message
}

// TestJSONEveryCommand: with --json, each command's output on stdout is
// JSON (streams: one object per line), and an error is one JSON object on
// stderr with its code, the exit code non-zero.
func TestJSONEveryCommand(t *testing.T) {
	t.Parallel()
	url := startCodeModeBus(t)
	dir := t.TempDir()
	j := func(args ...string) (int, string, string) {
		t.Helper()
		return run(t, append([]string{"--nats", url, "--json", "--log-level", "warn"}, args...)...)
	}

	code, out, errOut := j("submit", "--tool", "noop", "--input", `{"a":1}`, "--session", "js", "--id", "j1")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "j1", requireJSON(t, out)["id"])
	code, out, errOut = j("submit", "--tool", "noop", "--input", `{"a":2}`, "--session", "js", "--wait")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "toolq.job.completed", requireJSON(t, out)["type"])

	code, out, errOut = j("submit", "--tool", "sleep", "--input", `{"ms":60000}`, "--session", "js", "--id", "long")
	require.Equal(t, 0, code, errOut)
	requireJSON(t, out)
	code, out, errOut = j("cancel", "--session", "js", "long")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "long", requireJSON(t, out)["cancelled"])

	// A stream: one event per line, each a whole CloudEvent.
	code, out, errOut = j("events", "--session", "js")
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.GreaterOrEqual(t, len(lines), 3)
	for _, l := range lines {
		var ev contracts.Event
		require.NoError(t, json.Unmarshal([]byte(l), &ev), l)
		require.Equal(t, "1.0", ev.SpecVersion)
	}

	plan := filepath.Join(dir, "plan.js")
	require.NoError(t, os.WriteFile(plan, []byte(`return 6 * 7`), 0o600))
	code, out, errOut = j("exec", "--code", plan, "--session", "js", "--wait")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "completed", requireJSON(t, out)["status"])
	code, out, errOut = j("runs", "--session", "js")
	require.Equal(t, 0, code, errOut)
	require.True(t, json.Valid([]byte(out)), out)

	code, out, errOut = j("schedule", "add", "--every", "1h", "--tool", "noop", "--id", "hourly")
	require.Equal(t, 0, code, errOut)
	requireJSON(t, out)
	code, out, errOut = j("schedule", "ls")
	require.Equal(t, 0, code, errOut)
	require.True(t, json.Valid([]byte(out)), out)
	code, out, errOut = j("schedule", "pause", "hourly")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, []any{"hourly"}, requireJSON(t, out)["paused"])
	code, out, errOut = j("schedule", "resume", "hourly")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, []any{"hourly"}, requireJSON(t, out)["resumed"])
	code, out, errOut = j("schedule", "rm", "hourly")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, []any{"hourly"}, requireJSON(t, out)["deleted"])

	code, out, errOut = j("tenant", "register", "ACME")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, true, requireJSON(t, out)["registered"])
	code, out, errOut = j("tenant", "ls")
	require.Equal(t, 0, code, errOut)
	require.True(t, json.Valid([]byte(out)), out)
	code, out, errOut = j("tenant", "rm", "ACME", "--yes")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, true, requireJSON(t, out)["removed"])
	code, out, errOut = j("tenant", "add", "GLOBEX", "--out", dir)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, requireJSON(t, out)["accountEntry"], "GLOBEX")
	seed := filepath.Join(dir, "approver.seed")
	code, out, errOut = j("keygen", "--out", seed)
	require.Equal(t, 0, code, errOut)
	pub, _ := requireJSON(t, out)["user"].(string)
	require.True(t, nkeys.IsValidPublicUserKey(pub), out)
	data, err := os.ReadFile(seed) //nolint:gosec // G304: the test's own temp file
	require.NoError(t, err)
	kp, err := nkeys.FromSeed(bytes.TrimSpace(data))
	require.NoError(t, err)
	got, err := kp.PublicKey()
	require.NoError(t, err)
	require.Equal(t, pub, got, "the seed is the printed user's")
	fi, err := os.Stat(seed)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	code, _, errOut = j("keygen", "--out", seed)
	require.NotEqual(t, 0, code, "keygen never overwrites a seed")
	require.Contains(t, errOut, "exists")

	// Errors: one JSON object on stderr, with the code; stdout keeps what
	// the command printed before (a failed job's event).
	for _, tc := range []struct {
		args     []string
		wantCode contracts.ErrorCode
		exit     int
	}{
		{[]string{"submit", "--tool", "noop", "--input", "{bad"}, contracts.CodeInvalidInput, 2},
		{[]string{"submit", "--input", "{}"}, contracts.CodeInvalidInput, 2},
		{[]string{"submit", "--tool", "noop", "--no-such-flag"}, contracts.CodeInvalidInput, 2},
		{[]string{"cancel"}, contracts.CodeInvalidInput, 2},
		{[]string{"no-such-command"}, contracts.CodeInvalidInput, 2},
		{[]string{"wait", "--session", "js", "nope"}, contracts.CodeInvalidInput, 1},
		{[]string{"submit", "--tool", "sleep", "--input", `{"ms":-3}`, "--wait"}, contracts.CodeInvalidInput, 1},
	} {
		code, _, errOut := j(tc.args...)
		require.Equal(t, tc.exit, code, "%v: %s", tc.args, errOut)
		got, _ := requireJSONError(t, errOut)
		require.Equal(t, string(tc.wantCode), got, "%v", tc.args)
	}
	require.NoError(t, os.WriteFile(plan, []byte("const a = 1;\nthrow new Error('boom')"), 0o600))
	code, out, errOut = j("exec", "--code", plan, "--session", "js", "--wait")
	require.Equal(t, 1, code)
	require.Equal(t, "failed", requireJSON(t, out)["status"])
	got, msg := requireJSONError(t, errOut)
	require.Equal(t, string(contracts.CodeGuestError), got)
	require.Contains(t, msg, "code.js:2:")

	// Unreachable server: still one JSON error.
	code, _, errOut = run(t, "--nats", "nats://127.0.0.1:1", "--json", "submit", "--tool", "noop")
	require.Equal(t, 1, code)
	requireJSONError(t, errOut)
}

// TestJSONFlagReachesEveryCommand guards the list above: a command added
// later must be added to it (or here, with why it prints no JSON).
func TestJSONFlagReachesEveryCommand(t *testing.T) {
	t.Parallel()
	root, _ := newRoot(nil, nil)
	covered := map[string]bool{
		"toolq submit": true, "toolq cancel": true, "toolq events": true, "toolq exec": true, "toolq wait": true,
		"toolq runs": true, "toolq schedule add": true, "toolq schedule ls": true, "toolq schedule rm": true, "toolq schedule pause": true, "toolq schedule resume": true,
		"toolq tenant register": true, "toolq tenant ls": true, "toolq tenant rm": true, "toolq tenant add": true,
		"toolq keygen": true,
		// Tested elsewhere with --json: approve and deny (TestApproveDenyJSON),
		// bench (TestBenchJSON), dev (TestDevJSON).
		"toolq approve": true, "toolq deny": true, "toolq bench": true, "toolq dev": true,
		// tenant jwt init and add (TestTenantJWT).
		"toolq tenant jwt init": true, "toolq tenant jwt add": true,
		// Servers whose only output is their logs: --json makes them JSON
		// (the same handler as dev's).
		"toolq worker": true, "toolq scheduler": true,
		// Always JSON on stdout (TestToolsExport), and mcp serve's stdout
		// is MCP's own stream; their --json errors in TestToolsExport.
		"toolq tools export": true, "toolq mcp serve": true,
		// The operator's commands: JSON Lines from dlq ls and jobs ls, one
		// object from show, requeue and purge, and their --json errors
		// (TestDLQLsShowRequeue, TestDLQPurge, TestJobsLs, TestDLQTenants).
		"toolq dlq ls": true, "toolq dlq show": true, "toolq dlq requeue": true, "toolq dlq purge": true,
		"toolq jobs ls": true,
		// Rate limits: one object from set and rm, an array from ls, and
		// JSON errors (TestLimitsSetLsRm).
		"toolq limits set": true, "toolq limits ls": true, "toolq limits rm": true,
		// A server: its banner is one JSON log record with --json, and its
		// refusal of a tenant is a JSON error (TestUITenants).
		"toolq ui": true,
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && c.Name() != "help" && c.Name() != "completion" && !strings.HasPrefix(c.CommandPath(), "toolq completion") {
			require.True(t, covered[c.CommandPath()], "%s: add it to TestJSONEveryCommand", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// TestBenchJSON: bench --json prints its figures as one JSON object.
func TestBenchJSON(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "--json", "bench", "--jobs", "100", "--submitters", "2", "--concurrency", "8", "--latency-jobs", "3", "--latency-interval", "0s")
	require.Equal(t, 0, code, errOut)
	figs, ok := requireJSON(t, out)["figures"].([]any)
	require.True(t, ok, out)
	names := map[string]bool{}
	for _, f := range figs {
		m := f.(map[string]any)
		names[m["name"].(string)] = true
		require.NotEmpty(t, m["unit"])
	}
	require.True(t, names["bench.e2e_throughput"], out)
	require.Contains(t, errOut, "bench: throughput", "the phases still go to stderr")
}

// TestDevJSON: dev --once --json prints JSON on stdout (the self-check's
// event and run) and only JSON log records on stderr.
func TestDevJSON(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "--json", "dev", "--once", "--listen", "127.0.0.1:-1", "--data", t.TempDir())
	require.Equal(t, 0, code, errOut)
	dec := json.NewDecoder(strings.NewReader(out))
	n := 0
	for dec.More() {
		var v map[string]any
		require.NoError(t, dec.Decode(&v), out)
		n++
	}
	require.Equal(t, 2, n, out)
	for _, l := range strings.Split(strings.TrimSpace(errOut), "\n") {
		require.True(t, json.Valid([]byte(l)), "stderr line is not JSON: %q", l)
	}
	require.Contains(t, errOut, `"msg":"toolq dev ready"`)
}

// TestApproveDenyJSON: deny --json prints the decision as JSON; a second
// decision fails with one JSON error.
func TestApproveDenyJSON(t *testing.T) {
	t.Parallel()
	url, seed := startExecBus(t)
	id := pendingID(t, url, "id -u")
	code, out, errOut := run(t, "--nats", url, "--json", "deny", id, "--seed-file", seed, "--reason", "no")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, id, requireJSON(t, out)["approvalId"])
	code, _, errOut = run(t, "--nats", url, "--json", "deny", id, "--seed-file", seed)
	require.Equal(t, 1, code)
	_, msg := requireJSONError(t, errOut)
	require.Contains(t, msg, "already")
}
