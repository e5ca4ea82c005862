package codemode

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRunCountsAdmit: a fresh count admits suspensions up to the limit,
// counting each in; an old count, a missing one or one at the limit admits
// nothing (the caller counts afresh); counts of one filter do not touch
// another's (a tenant's or session's).
func TestRunCountsAdmit(t *testing.T) {
	t.Parallel()
	now := time.Now()
	var rc runCounts
	require.False(t, rc.admit("s1.*", 3, now), "no count yet")
	rc.counted("s1.*", 1, now)
	require.True(t, rc.admit("s1.*", 3, now))
	require.True(t, rc.admit("s1.*", 3, now))
	require.False(t, rc.admit("s1.*", 3, now), "at the limit: counted afresh, never refused from the cache")
	require.False(t, rc.admit("ACME.s1.*", 3, now), "another filter has its own count")
	rc.counted("s2.*", 0, now)
	require.False(t, rc.admit("s2.*", 3, now.Add(capWindow)), "a count one window old admits nothing")
	require.True(t, rc.admit("s2.*", 3, now.Add(capWindow-time.Millisecond)))
}

// TestRunCountsBounded: the cache holds at most capCacheMax counts, old
// ones going first.
func TestRunCountsBounded(t *testing.T) {
	t.Parallel()
	now := time.Now()
	var rc runCounts
	for i := range capCacheMax {
		rc.counted(fmt.Sprintf("old-%d.*", i), 0, now.Add(-capWindow))
	}
	rc.counted("new.*", 0, now)
	require.Len(t, rc.by, 1, "the old counts went")
	for i := range 2 * capCacheMax {
		rc.counted(fmt.Sprintf("s%d.*", i), 0, now)
		require.LessOrEqual(t, len(rc.by), capCacheMax)
	}
}
