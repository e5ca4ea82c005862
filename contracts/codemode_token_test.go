package contracts_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// TestNewCallToken: tokens are ids (they travel in jobs and results), of
// 128 bits, and never repeat.
func TestNewCallToken(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		tok, err := contracts.NewCallToken()
		require.NoError(t, err)
		require.True(t, contracts.ValidID(tok), tok)
		require.Len(t, tok, 22) // 16 bytes as unpadded base64url
		require.False(t, seen[tok], "a token repeated")
		seen[tok] = true
	}
}

func TestToolResultToken(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		token string
		ok    bool
	}{
		"none":     {"", true},
		"token":    {"AbC-_09AbC-_09AbC-_09A", true},
		"dot":      {"a.b", false},
		"wildcard": {">", false},
		"long":     {strings.Repeat("a", contracts.MaxIDLength+1), false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tr := contracts.ToolResult{RunID: "r", CallID: "c", Status: contracts.StatusCompleted, Token: tc.token}
			err := tr.Validate()
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, contracts.ErrInvalidInput)
			require.NotContains(t, err.Error(), tc.token, "an error must not repeat a token")
		})
	}
}
