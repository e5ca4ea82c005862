package schedulertest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/scheduler"
)

// A delayed job fires within a second of its time (At is a whole second:
// asynq scores are whole seconds), and the one-shot schedule is gone after.
func testDelayed(t *testing.T, d Driver) {
	t.Helper()
	b := setup(t, d)
	e := b.engine(t)
	s, err := e.Create(ctxT(t, 5*time.Second), b.schedule(scheduler.Schedule{ID: "later", In: 1500 * time.Millisecond}))
	require.NoError(t, err)
	require.Equal(t, s.At, s.At.Truncate(time.Second), "at is a whole second")
	js := b.jobs.waitN(t, 1, 10*time.Second)
	require.Len(t, js, 1)
	j := js[0]
	require.Equal(t, s.JobID(s.At), j.ID)
	require.False(t, j.Stored.Before(s.At), "fired early: stored %s, at %s", j.Stored, s.At)
	// Late only by scheduling noise: a loaded 2-core CI machine has shown
	// 1.2 s. A firing that waited for a later poll or a catch-up pass would
	// be later than this bound.
	require.Less(t, j.Stored.Sub(s.At), 5*time.Second, "fired late: stored %s, at %s", j.Stored, s.At)
	requireOnePerFiring(t, s.ID, js)
	require.Eventually(t, func() bool {
		_, err := e.Get(ctxT(t, 5*time.Second), s.ID)
		return err != nil
	}, 5*time.Second, 50*time.Millisecond, "one-shot schedule kept after firing")
	_, err = e.Get(ctxT(t, 5*time.Second), s.ID)
	require.ErrorIs(t, err, scheduler.ErrNotFound)
}

// "@every 1s" fires once a second: N+1 consecutive firings have fire
// times a whole second apart, spanning N seconds (one firing skipped for
// a tick handled late is allowed, as in the two-instance test), each
// stored soon after its fire time. The fire times, not the times the jobs
// were stored, carry the count: a loaded machine delays the stores, not
// the schedule.
func testEvery(t *testing.T, d Driver) {
	t.Helper()
	const n = 5
	b := setup(t, d)
	e := b.engine(t)
	s, err := e.Create(ctxT(t, 5*time.Second), b.schedule(scheduler.Schedule{ID: "tick", Every: time.Second}))
	require.NoError(t, err)
	all := b.jobs.waitN(t, n+1, n*time.Second+15*time.Second)[:n+1]
	requireOnePerFiring(t, s.ID, all)
	for i := 1; i < len(all); i++ {
		step := all[i].FireTime.Sub(all[i-1].FireTime)
		require.True(t, step > 0 && step%time.Second == 0, "fire times not a whole second apart: %v", ids(all))
	}
	span := all[n].FireTime.Sub(all[0].FireTime)
	require.InDelta(t, float64(n), span.Seconds(), 1, "%d firings after the first span %s: %v", n, span, ids(all))
	for _, j := range all {
		// Late only by scheduling noise (see testOneShot).
		require.Less(t, j.Stored.Sub(j.FireTime), 5*time.Second, "fired late: stored %s, fire time %s", j.Stored, j.FireTime)
	}
}

// A cron schedule is read in its time zone: the next fire time is computed
// deterministically, and one real firing (the next minute, in a spec that
// only matches the current hour of Europe/Berlin) arrives on time.
func testCron(t *testing.T, d Driver) {
	t.Helper()
	b := setup(t, d)
	e := b.engine(t)
	ctx := ctxT(t, 90*time.Second)
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)

	nightly, err := e.Create(ctx, b.schedule(scheduler.Schedule{ID: "nightly", Cron: "0 2 * * *", TimeZone: "Europe/Berlin"}))
	require.NoError(t, err)
	info, err := e.Get(ctx, nightly.ID)
	require.NoError(t, err)
	now := time.Now().In(berlin)
	want := time.Date(now.Year(), now.Month(), now.Day(), 2, 0, 0, 0, berlin)
	if !want.After(now) {
		want = time.Date(now.Year(), now.Month(), now.Day()+1, 2, 0, 0, 0, berlin)
	}
	require.True(t, want.Equal(info.Next), "next of 0 2 * * * in Berlin: want %s, got %s", want, info.Next)
	require.NoError(t, e.Delete(ctx, nightly.ID))

	// One real firing.
	next := time.Now().Truncate(time.Minute).Add(time.Minute)
	if time.Until(next) < 2*time.Second {
		next = next.Add(time.Minute)
	}
	spec := fmt.Sprintf("%d %d * * *", next.In(berlin).Minute(), next.In(berlin).Hour())
	s, err := e.Create(ctx, b.schedule(scheduler.Schedule{ID: "minute", Cron: spec, TimeZone: "Europe/Berlin"}))
	require.NoError(t, err)
	info, err = e.Get(ctx, s.ID)
	require.NoError(t, err)
	require.True(t, next.Equal(info.Next), "next of %q: want %s, got %s", spec, next, info.Next)
	js := b.jobs.waitN(t, 1, time.Until(next)+10*time.Second)
	require.Equal(t, s.JobID(next), js[0].ID)
	require.False(t, js[0].Stored.Before(next))
	require.Less(t, js[0].Stored.Sub(next), 2*time.Second)
}

// After Delete returns, no firing is enqueued.
func testDelete(t *testing.T, d Driver) {
	t.Helper()
	b := setup(t, d)
	e := b.engine(t)
	ctx := ctxT(t, 20*time.Second)
	s, err := e.Create(ctx, b.schedule(scheduler.Schedule{ID: "gone", Every: time.Second}))
	require.NoError(t, err)
	b.jobs.waitN(t, 2, 6*time.Second)
	require.NoError(t, e.Delete(ctx, s.ID))
	deleted := time.Now()
	_, err = e.Get(ctx, s.ID)
	require.ErrorIs(t, err, scheduler.ErrNotFound)
	require.ErrorIs(t, e.Delete(ctx, s.ID), scheduler.ErrNotFound)
	// Three more fire times pass; only a firing already under way at the
	// delete may still land, and only within its second.
	sleepUntil(deleted.Add(3 * time.Second))
	for _, j := range b.jobs.all() {
		require.True(t, j.FireTime.Before(deleted), "job %s fired after delete at %s", j.ID, deleted)
		require.Less(t, j.Stored.Sub(deleted), time.Second, "job %s stored after delete", j.ID)
	}
}

// A paused schedule fires nothing; resumed, it fires again from its next
// fire time, and the firings it skipped are not caught up.
func testPause(t *testing.T, d Driver) {
	t.Helper()
	b := setup(t, d)
	e := b.engine(t)
	ctx := ctxT(t, 30*time.Second)
	s, err := e.Create(ctx, b.schedule(scheduler.Schedule{ID: "nap", Every: time.Second}))
	require.NoError(t, err)
	b.jobs.waitN(t, 1, 6*time.Second)
	require.NoError(t, e.Pause(ctx, s.ID))
	paused := time.Now()
	in, err := e.Get(ctx, s.ID)
	require.NoError(t, err)
	require.True(t, in.Paused)
	require.True(t, in.Next.IsZero(), "a paused schedule has no next fire time")
	// Three fire times pass; only a firing already under way at the pause
	// may still land, and only within its second.
	sleepUntil(paused.Add(3 * time.Second))
	before := b.jobs.all()
	for _, j := range before {
		require.Less(t, j.Stored.Sub(paused), time.Second, "job %s stored while paused", j.ID)
	}
	require.NoError(t, e.Resume(ctx, s.ID))
	resumed := time.Now()
	all := b.jobs.waitN(t, len(before)+2, 6*time.Second)
	for _, j := range all[len(before):] {
		require.False(t, j.FireTime.Before(resumed.Add(-time.Second)), "job %s catches up a skipped firing (%s)", j.ID, j.FireTime)
	}
	requireOnePerFiring(t, s.ID, all)
	in, err = e.Get(ctx, s.ID)
	require.NoError(t, err)
	require.False(t, in.Paused)

	once, err := e.Create(ctx, b.schedule(scheduler.Schedule{ID: "once", In: time.Hour}))
	require.NoError(t, err)
	require.ErrorIs(t, e.Pause(ctx, once.ID), &contracts.Error{Code: contracts.CodeInvalidInput}, "a one-shot schedule does not pause")
	require.ErrorIs(t, e.Pause(ctx, "nope"), scheduler.ErrNotFound)
}

// Two scheduler instances at once: one job per firing over 20 firings.
func testTwoInstances(t *testing.T, d Driver) {
	t.Helper()
	const n = 20
	b := setup(t, d)
	e1 := b.engine(t)
	e2 := b.engine(t)
	s, err := e1.Create(ctxT(t, 5*time.Second), b.schedule(scheduler.Schedule{ID: "twice", Every: time.Second}))
	require.NoError(t, err)
	_, err = e2.Get(ctxT(t, 5*time.Second), s.ID)
	require.NoError(t, err)
	js := b.jobs.waitN(t, n, n*time.Second+10*time.Second)
	requireOnePerFiring(t, s.ID, js)
	span := js[len(js)-1].FireTime.Sub(js[0].FireTime)
	// n firings, one a second: at most one lost to a tick handled late.
	require.InDelta(t, float64(n-1), span.Seconds(), 1, "fire times of %d jobs span %s: %v", len(js), span, ids(js))
}

// A stopped engine starts again (the lifecycle allows it) and fires its
// schedules as before.
func testStartAgain(t *testing.T, d Driver) {
	t.Helper()
	b := setup(t, d)
	e := b.d.New(t, b.nc, b.backend)
	require.NoError(t, e.Start(ctxT(t, 15*time.Second)))
	s, err := e.Create(ctxT(t, 5*time.Second), b.schedule(scheduler.Schedule{ID: "again", Every: time.Second}))
	require.NoError(t, err)
	b.jobs.waitN(t, 1, 5*time.Second)
	stop(t, e)
	stopped := time.Now()

	require.NoError(t, e.Start(ctxT(t, 15*time.Second)))
	t.Cleanup(func() { stop(t, e) })
	js := b.jobs.waitFor(t, 10*time.Second, "a firing after the restart", func(js []job) bool {
		return len(js) > 0 && js[len(js)-1].FireTime.After(stopped.Add(time.Second))
	})
	requireOnePerFiring(t, s.ID, js)
}

// Schedules survive a scheduler restart; firings missed while it was down
// are caught up once (only the latest), then it fires on schedule.
func testRestart(t *testing.T, d Driver) {
	t.Helper()
	b := setup(t, d)
	e1 := b.d.New(t, b.nc, b.backend)
	require.NoError(t, e1.Start(ctxT(t, 15*time.Second)))
	s, err := e1.Create(ctxT(t, 5*time.Second), b.schedule(scheduler.Schedule{ID: "durable", Every: time.Second}))
	require.NoError(t, err)
	b.jobs.waitN(t, 1, 5*time.Second)
	stop(t, e1)
	down := time.Now()
	// Added while no scheduler runs, due during the outage: fires once, late.
	later, err := e1.Create(ctxT(t, 5*time.Second), b.schedule(scheduler.Schedule{ID: "during-outage", In: time.Second}))
	require.NoError(t, err)
	before := len(b.jobs.all())
	lastBefore := b.jobs.all()[before-1].FireTime
	// Four fire times pass with no scheduler.
	sleepUntil(down.Add(4 * time.Second))

	restarted := time.Now() // fire times up to here were missed
	e2 := b.engine(t)
	info, err := e2.Get(ctxT(t, 5*time.Second), s.ID)
	require.NoError(t, err)
	require.Equal(t, time.Second, info.Schedule.Every)
	js := b.jobs.waitFor(t, 10*time.Second, "firings after restart", func(js []job) bool {
		n := 0
		for _, j := range js {
			if j.ID != later.JobID(later.At) && j.FireTime.After(restarted.Add(time.Second)) {
				n++
			}
		}
		return n >= 2
	})
	var periodic []job
	for _, j := range js {
		if j.ID != later.JobID(later.At) {
			periodic = append(periodic, j)
		}
	}
	requireOnePerFiring(t, s.ID, periodic)
	// Missed: the fire times in (lastBefore, restarted]. Catch up once: at
	// most one of them is enqueued, and never one older than the last
	// second before the restart.
	caught := 0
	for _, j := range periodic {
		if j.FireTime.After(lastBefore) && !j.FireTime.After(restarted) {
			caught++
			require.False(t, j.FireTime.Before(restarted.Add(-time.Second).Truncate(time.Second)),
				"old missed firing %s enqueued (restart at %s)", j.ID, restarted)
		}
	}
	require.LessOrEqual(t, caught, 1, "missed firings enqueued more than once: %v", ids(periodic))
	// The delayed schedule due during the outage fires once, after it.
	js = b.jobs.waitFor(t, 10*time.Second, "delayed job after restart", func(js []job) bool {
		for _, j := range js {
			if j.ID == later.JobID(later.At) {
				return true
			}
		}
		return false
	})
	n := 0
	for _, j := range js {
		if j.ID == later.JobID(later.At) {
			n++
			require.True(t, j.Stored.After(restarted.Add(-100*time.Millisecond)), "delayed job stored at %s, before the restart at %s", j.Stored, restarted)
		}
	}
	require.Equal(t, 1, n)
	require.True(t, later.At.Before(restarted), "the delayed job was due during the outage")
}

// The engine's backend (Redis for asynq) restarts empty mid-run: firings
// resume, none is doubled, and a delayed schedule made before still fires.
func testBackendRestart(t *testing.T, d Driver) {
	t.Helper()
	b := setup(t, d)
	if b.backend == nil {
		t.Skip("engine has no backend besides NATS")
	}
	e := b.engine(t)
	ctx := ctxT(t, 5*time.Second)
	s, err := e.Create(ctx, b.schedule(scheduler.Schedule{ID: "resilient", Every: time.Second}))
	require.NoError(t, err)
	later, err := e.Create(ctx, b.schedule(scheduler.Schedule{ID: "delayed", In: 5 * time.Second}))
	require.NoError(t, err)
	b.jobs.waitN(t, 2, 6*time.Second)
	b.backend.Stop()
	down := time.Now()
	sleepUntil(down.Add(2 * time.Second))
	b.backend.Start()
	up := time.Now()
	js := b.jobs.waitFor(t, 15*time.Second, "firings after the restart", func(js []job) bool {
		n, delayed := 0, false
		for _, j := range js {
			if j.ID == later.JobID(later.At) {
				delayed = true
			} else if j.Stored.After(up) {
				n++
			}
		}
		return delayed && n >= 3
	})
	var periodic []job
	for _, j := range js {
		if j.ID != later.JobID(later.At) {
			periodic = append(periodic, j)
		}
	}
	requireOnePerFiring(t, s.ID, periodic)
	require.Len(t, js, len(periodic)+1, "the delayed job enqueued more than once")
}

// NATS restarts on the same store: schedules and their firings continue.
func testNATSRestart(t *testing.T, d Driver) {
	t.Helper()
	b := setup(t, d)
	e := b.engine(t)
	ctx := ctxT(t, 5*time.Second)
	s, err := e.Create(ctx, b.schedule(scheduler.Schedule{ID: "kept", Every: time.Second}))
	require.NoError(t, err)
	later, err := e.Create(ctx, b.schedule(scheduler.Schedule{ID: "kept-delayed", In: 4 * time.Second}))
	require.NoError(t, err)
	b.jobs.waitN(t, 1, 5*time.Second)
	b.natsSrv.shutdown()
	b.natsSrv.start(t)
	up := time.Now()
	js := b.jobs.waitFor(t, 20*time.Second, "firings after the NATS restart", func(js []job) bool {
		n, delayed := 0, false
		for _, j := range js {
			if j.ID == later.JobID(later.At) {
				delayed = true
			} else if j.Stored.After(up) {
				n++
			}
		}
		return delayed && n >= 2
	})
	var periodic []job
	for _, j := range js {
		if j.ID != later.JobID(later.At) {
			periodic = append(periodic, j)
		}
	}
	requireOnePerFiring(t, s.ID, periodic)
	// A schedule made after the restart fires too.
	after, err := e.Create(ctxT(t, 10*time.Second), b.schedule(scheduler.Schedule{ID: "after", In: time.Second}))
	require.NoError(t, err)
	b.jobs.waitFor(t, 10*time.Second, "job of a schedule made after the restart", func(js []job) bool {
		for _, j := range js {
			if j.ID == after.JobID(after.At) {
				return true
			}
		}
		return false
	})
	// The fired one-shot schedules go; the periodic one stays.
	require.Eventually(t, func() bool {
		list, err := e.List(ctxT(t, 10*time.Second))
		return err == nil && len(list) == 1 && list[0].Schedule.ID == s.ID
	}, 5*time.Second, 50*time.Millisecond)
}

// Bad schedules are refused at creation with invalid_input.
func testBadInput(t *testing.T, d Driver) {
	t.Helper()
	b := setup(t, d)
	e := b.d.New(t, b.nc, b.backend) // creation needs no running engine
	t.Cleanup(func() { stop(t, e) })
	ctx := ctxT(t, 10*time.Second)
	job := scheduler.Job{Tool: "noop"}
	cases := map[string]scheduler.Schedule{
		"nothing":           {Job: job},
		"two kinds":         {Every: time.Minute, Cron: "* * * * *", Job: job},
		"invalid cron":      {Cron: "61 * * * *", Job: job},
		"four fields":       {Cron: "* * * *", Job: job},
		"seconds field":     {Cron: "* * * * * *", Job: job},
		"never fires":       {Cron: "0 0 30 2 *", Job: job},
		"tz in expression":  {Cron: "CRON_TZ=UTC * * * * *", Job: job},
		"unknown time zone": {Cron: "0 2 * * *", TimeZone: "Mars/Olympus_Mons", Job: job},
		"tz on every":       {Every: time.Minute, TimeZone: "Europe/Berlin", Job: job},
		"past at":           {At: time.Now().Add(-time.Minute), Job: job},
		"negative in":       {In: -time.Second, Job: job},
		"every under 1s":    {Every: 500 * time.Millisecond, Job: job},
		"every fractional":  {Every: 1500 * time.Millisecond, Job: job},
		"invalid tool":      {Every: time.Minute, Job: scheduler.Job{Tool: "no tool"}},
		"no tool":           {Every: time.Minute},
		"invalid id":        {ID: "a.b", Every: time.Minute, Job: job},
		"id too long":       {ID: strings.Repeat("a", scheduler.MaxIDLength+1), Every: time.Minute, Job: job},
		"invalid session":   {Every: time.Minute, Job: scheduler.Job{Tool: "noop", Session: "a b"}},
		"invalid input":     {Every: time.Minute, Job: scheduler.Job{Tool: "noop", Input: json.RawMessage(`{"a":`)}},
		"negative timeout":  {Every: time.Minute, Job: scheduler.Job{Tool: "noop", TimeoutMs: -1}},
	}
	for name, s := range cases {
		_, err := e.Create(ctx, &s)
		require.ErrorIs(t, err, contracts.ErrInvalidInput, name)
		var ce *contracts.Error
		require.ErrorAs(t, err, &ce, name)
		require.NotEmpty(t, ce.Message, name)
	}
	list, err := e.List(ctx)
	require.NoError(t, err)
	require.Empty(t, list)
}

// Create, List, Get and Delete through the engine.
func testCRUD(t *testing.T, d Driver) {
	t.Helper()
	b := setup(t, d)
	e := b.engine(t)
	ctx := ctxT(t, 10*time.Second)
	at := time.Now().Add(time.Hour)
	for _, s := range []scheduler.Schedule{
		{ID: "c", Cron: "@daily", TimeZone: "Asia/Kolkata"},
		{ID: "a", At: at},
		{ID: "b", Every: 90 * time.Second},
	} {
		_, err := e.Create(ctx, b.schedule(s))
		require.NoError(t, err)
	}
	_, err := e.Create(ctx, b.schedule(scheduler.Schedule{ID: "a", Every: time.Minute}))
	require.ErrorIs(t, err, scheduler.ErrExists)
	list, err := e.List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 3)
	require.Equal(t, []string{"a", "b", "c"}, []string{list[0].Schedule.ID, list[1].Schedule.ID, list[2].Schedule.ID})
	require.Equal(t, scheduler.KindAt, list[0].Schedule.Kind())
	require.True(t, list[0].Next.Equal(at.Truncate(time.Second).Add(time.Second)), "next %s", list[0].Next)
	require.Equal(t, scheduler.KindEvery, list[1].Schedule.Kind())
	require.Equal(t, scheduler.KindCron, list[2].Schedule.Kind())
	kolkata, _ := time.LoadLocation("Asia/Kolkata")
	n := list[2].Next.In(kolkata)
	require.Equal(t, [3]int{0, 0, 0}, [3]int{n.Hour(), n.Minute(), n.Second()}, "next of @daily in Kolkata: %s", n)
	for _, id := range []string{"a", "b", "c"} {
		require.NoError(t, e.Delete(ctx, id))
	}
	list, err = e.List(ctx)
	require.NoError(t, err)
	require.Empty(t, list)
	require.Empty(t, b.jobs.all())
}
