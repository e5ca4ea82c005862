package sandbox

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// A script that passed the loader check passes again without a parse in
// its scope (a tenant), and only there; a refused one is refused every time, and a script differing by one
// character is parsed on its own.
func TestLoaderCheckRemembersOnlyPasses(t *testing.T) {
	t.Parallel()
	wrap := func(code string) string { return wrapPrefix + code + wrapSuffix }
	pos := newPositions("x", false, "")
	ok := wrap(`return typeof globalThis.require + "remembered"`)
	require.NoError(t, checkLoadersOnce("A", ok, pos))
	accepted.Lock()
	_, remembered := accepted.by[acceptedKey("A", ok)]
	_, elsewhere := accepted.by[acceptedKey("B", ok)]
	accepted.Unlock()
	require.True(t, remembered)
	require.False(t, elsewhere, "a pass in one scope was remembered for another")
	require.NoError(t, checkLoadersOnce("A", ok, pos))

	bad := wrap(`return typeof require + "remembered"`)
	for range 2 {
		err := checkLoadersOnce("A", bad, pos)
		require.ErrorIs(t, err, contracts.ErrInvalidInput)
		require.Contains(t, err.Error(), "require()")
	}
	accepted.Lock()
	_, remembered = accepted.by[acceptedKey("A", bad)]
	accepted.Unlock()
	require.False(t, remembered, "a refusal was remembered")
}
