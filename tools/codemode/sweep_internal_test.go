package codemode

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDueTimers: a timer is armed only for a due time after now and
// within the horizon, a new due time replaces the old one, and a fired
// timer hands its key over once and is forgotten.
func TestDueTimers(t *testing.T) {
	t.Parallel()
	d := newDueTimers(time.Second)
	now := time.Now()
	d.set("past", now.Add(-time.Millisecond), now)
	d.set("far", now.Add(2*time.Second), now)
	d.set("soon", now.Add(time.Hour), now)
	d.set("soon", now.Add(20*time.Millisecond), now) // replaces the hour
	d.set("gone", now.Add(30*time.Millisecond), now)
	d.stop("gone")
	armed := func() int {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.by)
	}
	require.Equal(t, 1, armed())
	select {
	case key := <-d.fired:
		require.Equal(t, "soon", key)
	case <-time.After(5 * time.Second):
		t.Fatal("the timer did not fire")
	}
	require.Eventually(t, func() bool { return armed() == 0 }, time.Second, time.Millisecond)
	select {
	case key := <-d.fired:
		t.Fatalf("%s fired too", key)
	case <-time.After(100 * time.Millisecond):
	}
	d.set("a", now.Add(500*time.Millisecond), now)
	d.stopAll()
	require.Zero(t, armed())
}
