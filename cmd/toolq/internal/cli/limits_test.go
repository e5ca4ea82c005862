package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// `limits set|ls|rm`: a limit is written, listed and removed; bad rates,
// bursts and tools are refused before anything is written.
func TestLimitsSetLsRm(t *testing.T) {
	t.Parallel()
	url := startBus(t)
	code, out, errOut := run(t, "--nats", url, "limits", "ls")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "no rate limits")
	code, out, errOut = run(t, "--nats", url, "limits", "set", "code_execution", "60/min", "--burst", "10")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "code_execution: 60/min burst 10\n", out)
	code, out, errOut = run(t, "--nats", url, "--json", "limits", "set", "noop", "5/30s", "--tenant", "ACME")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, `{"tool":"noop","tenant":"ACME","rate":5,"per":30000000000,"burst":1}`, out)
	code, out, errOut = run(t, "--nats", url, "--json", "limits", "ls")
	require.Equal(t, 0, code, errOut)
	var lims []contracts.RateLimit
	require.NoError(t, json.Unmarshal([]byte(out), &lims))
	require.Equal(t, []contracts.RateLimit{
		{Tool: "code_execution", Rate: 60, Per: time.Minute, Burst: 10},
		{Tool: "noop", Tenant: "ACME", Rate: 5, Per: 30 * time.Second, Burst: 1},
	}, lims)
	for _, args := range [][]string{
		{"set", "noop", "sixty"},
		{"set", "noop", "0/s"},
		{"set", "noop", "10/fortnight"},
		{"set", "noop", "10/s", "--burst", "0"},
		{"set", "no tool", "10/s"},
		{"set", "noop", "10/100ms"},
		{"rm", "noop"},
		{"set", "--provider", "grok", "10/s"},
		{"set", "--provider", "xai", "10/s", "--tenant", "ACME"},
		{"set", "--provider", "xai", "noop", "10/s"},
		{"set", "--key-id", "0123456789abcdef", "10/s"},
		{"set", "--provider", "xai", "--key-id", "sk-live-secret", "10/s"},
		{"set", "noop"},
		{"rm", "--provider", "openai"},
		{"rm"},
	} {
		code, _, errOut := run(t, append([]string{"--nats", url, "--json", "limits"}, args...)...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(errOut), &e), errOut)
		require.Equal(t, "invalid_input", e.Error.Code, args)
	}
	// A provider's keys: every key, and one key by its id.
	code, out, errOut = run(t, "--nats", url, "limits", "set", "--provider", "xai", "600/min", "--burst", "20")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "provider xai: 600/min burst 20\n", out)
	code, out, errOut = run(t, "--nats", url, "--json", "limits", "set", "--provider", "xai", "--key-id", "0123456789abcdef", "2/s")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, `{"provider":"xai","key_id":"0123456789abcdef","rate":2,"per":1000000000,"burst":1}`, out)
	code, out, errOut = run(t, "--nats", url, "limits", "ls")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "provider xai key 0123456789abcdef")
	code, out, errOut = run(t, "--nats", url, "--json", "limits", "rm", "--provider", "xai", "--key-id", "0123456789abcdef")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, `{"provider":"xai","key_id":"0123456789abcdef","removed":true}`, out)
	code, out, errOut = run(t, "--nats", url, "--json", "limits", "ls")
	require.Equal(t, 0, code, errOut)
	lims = nil
	require.NoError(t, json.Unmarshal([]byte(out), &lims))
	require.Contains(t, lims, contracts.RateLimit{Provider: "xai", Rate: 600, Per: time.Minute, Burst: 20})
	require.Len(t, lims, 3)

	code, out, errOut = run(t, "--nats", url, "--json", "limits", "rm", "noop", "--tenant", "ACME")
	require.Equal(t, 0, code, errOut)
	require.JSONEq(t, `{"tool":"noop","tenant":"ACME","removed":true}`, out)
	code, out, errOut = run(t, "--nats", url, "limits", "ls")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "code_execution")
	require.NotContains(t, out, "ACME")
}

// A malformed rate limit in the providers' configuration stops `toolq
// worker` at start, with the provider and the field in the error.
func TestWorkerRefusesMalformedProviderRate(t *testing.T) {
	t.Parallel()
	url := startBus(t)
	cfgFile := filepath.Join(t.TempDir(), "providers.json")
	require.NoError(t, os.WriteFile(cfgFile, []byte(`{"providers": {"xai": {"apiKey": "test-key", "rateLimit": "sixty a minute"}}}`), 0o600))
	code, _, errOut := run(t, "--nats", url, "worker", "--no-code-mode", "--no-exec", "--providers-config", cfgFile)
	require.NotEqual(t, 0, code, errOut)
	require.Contains(t, errOut, "xai rateLimit")
	require.NotContains(t, errOut, "test-key")
}
