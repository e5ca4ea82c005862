package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLongestGap(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms ...int) []time.Time {
		out := make([]time.Time, len(ms))
		for i, m := range ms {
			out[i] = t0.Add(time.Duration(m) * time.Millisecond)
		}
		return out
	}
	ms := func(m int) time.Duration { return time.Duration(m) * time.Millisecond }
	for name, tc := range map[string]struct {
		ts        []time.Time
		from, end int
		want      time.Duration
	}{
		"steady":                           {at(100, 105, 110, 115), 100, 115, ms(5)},
		"a hole":                           {at(100, 105, 4105, 4110), 100, 4110, ms(4000)},
		"unordered":                        {at(4105, 100, 4110, 105), 100, 4110, ms(4000)},
		"before from is not counted":       {at(0, 1000, 1005), 1000, 1005, ms(5)},
		"from to the first":                {at(600, 605), 100, 605, ms(500)},
		"nothing after the last until end": {at(100, 105), 100, 3105, ms(3000)},
		"the first after end closes it":    {at(100, 2000, 30000), 100, 1000, ms(1900)},
		"none at all":                      {nil, 100, 600, ms(500)},
	} {
		got := longestGap(tc.ts, t0.Add(ms(tc.from)), t0.Add(ms(tc.end)))
		require.Equal(t, tc.want, got, name)
	}
}
