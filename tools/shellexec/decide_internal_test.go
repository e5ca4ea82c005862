package shellexec

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/shell"
)

func TestDecideActionFor(t *testing.T) {
	t.Parallel()
	now := time.Now()
	decidedAt := now.Add(-time.Hour)
	d := shell.ApprovalDecision{ApprovalID: "a1", Verdict: shell.Approve, Nonce: "n", Signature: "sig", IssuedAt: decidedAt}
	other := d
	other.Nonce, other.Signature = "m", "sig2"
	forged := d
	forged.Always = true // same signature, other payload
	decided := func(status string) *Record {
		dc := d
		return &Record{Status: status, Decision: &dc, DecideJob: "dj-1", DecidedAt: decidedAt}
	}
	cases := []struct {
		name     string
		rec      *Record
		d        shell.ApprovalDecision
		job      string
		attempt  int
		kind     decideKind
		verifyAt time.Time
	}{
		{"pending", &Record{Status: StatusPending}, d, "dj-1", 1, decideNew, now},
		{"redelivery of the deciding job", decided(StatusApproved), d, "dj-1", 2, decideResume, decidedAt},
		{"replay after the duplicate window", decided(StatusApproved), d, "dj-1", 1, decideIgnore, decidedAt},
		{"same decision in another job", decided(StatusApproved), d, "dj-2", 2, decideIgnore, decidedAt},
		{"another decision", decided(StatusApproved), other, "dj-1", 2, decideIgnore, now},
		{"same signature, other payload", decided(StatusApproved), forged, "dj-1", 2, decideIgnore, now},
		{"denied, redelivered", decided(StatusDenied), d, "dj-1", 3, decideResume, decidedAt},
		{"cancelled", &Record{Status: StatusCancelled}, d, "dj-1", 2, decideIgnore, now},
	}
	for _, tc := range cases {
		got := decideActionFor(tc.rec, &tc.d, tc.job, tc.attempt, now)
		require.Equal(t, tc.kind, got.kind, tc.name)
		require.True(t, tc.verifyAt.Equal(got.verifyAt), "%s: verify at %s, want %s", tc.name, got.verifyAt, tc.verifyAt)
	}
}
