package scheduler_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/scheduler"
)

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestNextAndLatest(t *testing.T) {
	t.Parallel()
	created := ts("2026-06-01T00:00:00Z")
	every := scheduler.Schedule{ID: "e", Every: 10 * time.Second, Anchor: ts("2026-07-01T12:00:00Z"), CreatedAt: created}
	at := scheduler.Schedule{ID: "a", At: ts("2026-07-01T12:00:00Z"), CreatedAt: created}
	cronBerlin := scheduler.Schedule{ID: "c", Cron: "0 2 * * *", TimeZone: "Europe/Berlin", CreatedAt: created}
	cronNY := scheduler.Schedule{ID: "n", Cron: "30 9 * * 1-5", TimeZone: "America/New_York", CreatedAt: created}
	daily := scheduler.Schedule{ID: "d", Cron: "@daily", TimeZone: "Asia/Kolkata", CreatedAt: created}
	utc := scheduler.Schedule{ID: "u", Cron: "*/15 * * * *", CreatedAt: created}

	tests := []struct {
		name         string
		s            scheduler.Schedule
		t            string
		next, latest string // "" is the zero time
	}{
		{"every before anchor", every, "2026-07-01T11:59:00Z", "2026-07-01T12:00:10Z", ""},
		{"every at anchor", every, "2026-07-01T12:00:00Z", "2026-07-01T12:00:10Z", ""},
		{"every between", every, "2026-07-01T12:00:05Z", "2026-07-01T12:00:10Z", ""},
		{"every on a fire time", every, "2026-07-01T12:00:10Z", "2026-07-01T12:00:20Z", "2026-07-01T12:00:10Z"},
		{"every later", every, "2026-07-01T12:01:25.5Z", "2026-07-01T12:01:30Z", "2026-07-01T12:01:20Z"},
		{"at before", at, "2026-07-01T11:00:00Z", "2026-07-01T12:00:00Z", ""},
		{"at after", at, "2026-07-01T13:00:00Z", "", "2026-07-01T12:00:00Z"},
		// 02:00 in Berlin is 00:00 UTC in summer (CEST) and 01:00 in winter (CET).
		{"cron berlin summer", cronBerlin, "2026-07-01T00:30:00Z", "2026-07-02T00:00:00Z", "2026-07-01T00:00:00Z"},
		{"cron berlin winter", cronBerlin, "2026-12-02T10:00:00Z", "2026-12-03T01:00:00Z", "2026-12-02T01:00:00Z"},
		{"cron before creation", cronBerlin, "2026-06-01T00:30:00Z", "2026-06-02T00:00:00Z", ""},
		// 09:30 on weekdays in New York; 2026-07-03 is a Friday.
		{"cron weekdays", cronNY, "2026-07-04T12:00:00Z", "2026-07-06T13:30:00Z", "2026-07-03T13:30:00Z"},
		{"cron descriptor", daily, "2026-07-01T20:00:00Z", "2026-07-02T18:30:00Z", "2026-07-01T18:30:00Z"},
		{"cron utc", utc, "2026-07-01T12:14:59Z", "2026-07-01T12:15:00Z", "2026-07-01T12:00:00Z"},
		{"cron utc on a fire time", utc, "2026-07-01T12:15:00Z", "2026-07-01T12:30:00Z", "2026-07-01T12:15:00Z"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			now := ts(tc.t)
			want := func(s string) time.Time {
				if s == "" {
					return time.Time{}
				}
				return ts(s)
			}
			require.True(t, want(tc.next).Equal(tc.s.Next(now)), "next: want %s, got %s", tc.next, tc.s.Next(now))
			require.True(t, want(tc.latest).Equal(tc.s.Latest(now)), "latest: want %s, got %s", tc.latest, tc.s.Latest(now))
		})
	}
}

func TestKindSpecJobID(t *testing.T) {
	t.Parallel()
	require.Equal(t, scheduler.Kind(""), (&scheduler.Schedule{}).Kind())
	require.Equal(t, scheduler.Kind(""), (&scheduler.Schedule{In: time.Second, Every: time.Second}).Kind())
	require.Equal(t, scheduler.Kind(""), (&scheduler.Schedule{In: time.Second, At: time.Now()}).Kind())
	require.Equal(t, scheduler.KindAt, (&scheduler.Schedule{In: time.Second}).Kind())
	s := &scheduler.Schedule{ID: "nightly", Cron: "0 2 * * *", TimeZone: "Europe/Berlin"}
	require.Equal(t, scheduler.KindCron, s.Kind())
	require.Equal(t, "0 2 * * * (Europe/Berlin)", s.Spec())
	require.Equal(t, "nightly-1782871200", s.JobID(ts("2026-07-01T02:00:00Z")))
	require.Equal(t, "@every 1m30s", (&scheduler.Schedule{Every: 90 * time.Second}).Spec())
	require.Equal(t, "@at 2026-07-01T02:00:00Z", (&scheduler.Schedule{At: ts("2026-07-01T04:00:00+02:00")}).Spec())
}

func TestScheduleJSON(t *testing.T) {
	t.Parallel()
	s := scheduler.Schedule{
		ID: "x", Every: 90 * time.Second, Anchor: ts("2026-07-01T00:00:00Z"), CreatedAt: ts("2026-07-01T00:00:00Z"),
		Job: scheduler.Job{Tool: "noop", Session: "s", Input: json.RawMessage(`{"a":1}`), Meta: map[string]string{"k": "v"}},
	}
	b, err := json.Marshal(s)
	require.NoError(t, err)
	require.Contains(t, string(b), `"every":"1m30s"`)
	require.Contains(t, string(b), `"kind":"every"`)
	var back scheduler.Schedule
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, s.Every, back.Every)
	require.True(t, s.Anchor.Equal(back.Anchor))
	require.Equal(t, s.Job.Tool, back.Job.Tool)
	require.JSONEq(t, `{"a":1}`, string(back.Job.Input))
	require.Error(t, json.Unmarshal([]byte(`{"every":"soon"}`), &back))
}
