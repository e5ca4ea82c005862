package contracts_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// A provider key's limit: its keys, its override order, and what
// Validate and DecodeRateLimit refuse.
func TestProviderRateLimit(t *testing.T) {
	t.Parallel()
	key := contracts.RateLimit{Provider: "xai", KeyID: "0123456789abcdef", Rate: 60, Per: time.Minute, Burst: 10}
	require.NoError(t, key.Validate())
	require.Equal(t, "limit.p.xai.0123456789abcdef", key.LimitKey())
	require.Equal(t, "tat.p.xai.0123456789abcdef", key.StateKey())
	require.Equal(t, []string{"limit.p.xai.0123456789abcdef", "limit.p.xai"}, key.OverrideKeys())
	require.Equal(t, "provider xai key 0123456789abcdef", key.Subject())
	all := contracts.RateLimit{Provider: "xai", Rate: 1, Per: time.Second, Burst: 1}
	require.NoError(t, all.Validate())
	require.Equal(t, contracts.ProviderRateLimitKey("xai", ""), all.LimitKey())
	require.Equal(t, "provider xai", all.Subject())
	tool := contracts.RateLimit{Tool: "noop", Tenant: "ACME", Rate: 1, Per: time.Second, Burst: 1}
	require.Equal(t, contracts.RateLimitKey("ACME", "noop"), tool.LimitKey())
	require.Equal(t, contracts.RateStateKey("ACME", "noop"), tool.StateKey())
	require.Equal(t, []string{tool.LimitKey()}, tool.OverrideKeys())

	for name, bad := range map[string]contracts.RateLimit{
		"tool and provider":  {Tool: "noop", Provider: "xai", Rate: 1, Per: time.Second, Burst: 1},
		"tenant":             {Provider: "xai", Tenant: "ACME", Rate: 1, Per: time.Second, Burst: 1},
		"provider name":      {Provider: "x.ai", Rate: 1, Per: time.Second, Burst: 1},
		"key id not hex":     {Provider: "xai", KeyID: "sk-live-secret00", Rate: 1, Per: time.Second, Burst: 1},
		"key id short":       {Provider: "xai", KeyID: "0123", Rate: 1, Per: time.Second, Burst: 1},
		"key id without one": {KeyID: "0123456789abcdef", Rate: 1, Per: time.Second, Burst: 1},
		"rate":               {Provider: "xai", Rate: 0, Per: time.Second, Burst: 1},
	} {
		require.ErrorIs(t, bad.Validate(), contracts.ErrInvalidInput, name)
	}

	data, err := json.Marshal(key)
	require.NoError(t, err)
	got, err := contracts.DecodeRateLimit(key.LimitKey(), data)
	require.NoError(t, err)
	require.Equal(t, key, *got)
	_, err = contracts.DecodeRateLimit("limit.p.xai", data)
	require.ErrorIs(t, err, contracts.ErrInvalidInput, "a key's limit under the provider's key")
	_, err = contracts.DecodeRateLimit("limit.p.openai.0123456789abcdef", data)
	require.ErrorIs(t, err, contracts.ErrInvalidInput, "under another provider")
}
