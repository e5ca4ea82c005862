package shell

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSafeBinDash: a bare "-" is a file operand like any other (GNU tee
// writes a file named "-"), so a safe bin given one is a miss; "-" as a
// flag's value (grep -e -) is not an operand.
func TestSafeBinDash(t *testing.T) {
	t.Parallel()
	cases := []struct {
		bin  string
		args []string
		miss string // a substring of the reason; "" means accepted
	}{
		{bin: "sort", args: []string{"-u"}},
		{bin: "sort", args: []string{"-u", "-"}, miss: `"-"`},
		{bin: "sort", args: []string{"-", "-u"}, miss: `"-"`},
		{bin: "cat", args: []string{"-"}, miss: `"-"`},
		{bin: "head", args: []string{"-n", "5", "-"}, miss: `"-"`},
		{bin: "grep", args: []string{"foo", "-"}, miss: `"-"`},
		{bin: "grep", args: []string{"-e", "-"}},
		{bin: "grep", args: []string{"-e", "x", "--", "-"}, miss: `"-"`},
		{bin: "grep", args: []string{"--", "-"}, miss: `"-"`},
		{bin: "jq", args: []string{".", "-"}, miss: `"-"`},
		{bin: "tr", args: []string{"-", "_"}, miss: `"-"`},
		{bin: "tr", args: []string{"a", "-"}, miss: `"-"`},
		{bin: "tee", args: nil}, // no profile: no arguments at all
		{bin: "tee", args: []string{"-"}, miss: `"-"`},
		{bin: "tee", args: []string{"-a"}, miss: "no arguments"},
	}
	for _, tc := range cases {
		t.Run(tc.bin+" "+strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			why := checkSafeArgs(tc.bin, tc.args)
			if tc.miss == "" {
				require.Empty(t, why)
				return
			}
			require.Contains(t, why, tc.miss)
		})
	}
}
