package codemode

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/sandbox"
)

func sampleRecord() *record {
	return &record{
		RunID: "r1", Session: "s1", Tenant: "acme", ExecJob: "r1", Status: runWaiting, Reason: "pending_tools",
		Pending:  []pendingCall{{CallID: "call_1", ToolID: "toolq:core:noop", JobID: "r1-call_1", Input: json.RawMessage(`{"x":1}`), Token: "t"}},
		Results:  []callResult{{CallID: "call_1", Value: json.RawMessage(`{"x":1}`), At: time.Unix(1, 0).UTC()}},
		Snapshot: []byte("TQJS snapshot bytes \x00\xff<>&"), SnapshotBytes: 27,
		Lease: &lease{Owner: "w", Until: time.Unix(2, 0).UTC(), Token: "l"}, Wait: &lease{Owner: "wait", Until: time.Unix(3, 0).UTC()},
		Final:   &sandbox.Result{Status: sandbox.StatusCompleted, Value: json.RawMessage(`2`)},
		Catalog: map[string]catalogRef{"toolq:core:noop": {Tool: "noop", Source: "toolq"}},
		History: []callResult{{CallID: "call_0", Error: "e", At: time.Unix(4, 0).UTC()}},
		Limits:  sandbox.DefaultLimits(), TTLSeconds: 900, Waits: 1,
	}
}

// TestRecordMarshal: a record's JSON, with its inline snapshot's member
// made once and appended, reads back as json.Marshal's does; a new
// snapshot replaces the member, and a record without one has none.
func TestRecordMarshal(t *testing.T) {
	t.Parallel()
	r := sampleRecord()
	want, err := json.Marshal(r)
	require.NoError(t, err)
	for range 2 { // the second time from the remembered member
		got, err := r.marshal()
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(got))
	}
	require.NotNil(t, r.snapJSON)

	r.Snapshot = []byte("another snapshot")
	want, err = json.Marshal(r)
	require.NoError(t, err)
	got, err := r.marshal()
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got))
	var back record
	require.NoError(t, json.Unmarshal(got, &back))
	require.Equal(t, []byte("another snapshot"), back.Snapshot)

	r.Snapshot = r.Snapshot[:7] // same first byte, another length
	got, err = r.marshal()
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(got, &back))
	require.Equal(t, []byte("another"), back.Snapshot)

	r.Snapshot, r.SnapshotObject = nil, "acme.s1.r1"
	got, err = r.marshal()
	require.NoError(t, err)
	require.NotContains(t, string(got), `"snapshot"`)
	require.NoError(t, json.Unmarshal(got, &back))
	require.Equal(t, "acme.s1.r1", back.SnapshotObject)
}

// TestRecordClone: a clone shares nothing its holder changes in place,
// and every field of a reference kind is one clone copies (a new such
// field must be added to clone, or this fails).
func TestRecordClone(t *testing.T) {
	t.Parallel()
	copied := map[string]bool{"Pending": true, "Results": true, "History": true, "Catalog": true, "Lease": true, "Wait": true, "Final": true}
	// Never changed in place, only replaced: shared.
	shared := map[string]bool{"Snapshot": true, "snapJSON": true, "snapOf": true}
	rt := reflect.TypeFor[record]()
	for i := range rt.NumField() {
		f := rt.Field(i)
		switch f.Type.Kind() {
		case reflect.Slice, reflect.Map, reflect.Pointer, reflect.Interface, reflect.Chan, reflect.Func:
			require.True(t, copied[f.Name] || shared[f.Name], "record.%s is of a reference kind: copy it in clone", f.Name)
		default:
		}
	}

	r := sampleRecord()
	want, err := json.Marshal(r)
	require.NoError(t, err)
	c := r.clone()
	require.Equal(t, r, c)
	c.Pending[0].Submitted = true
	c.Results[0].Error = "changed"
	c.Results = append(c.Results, callResult{CallID: "call_2"})
	c.History[0].Error = "changed"
	c.Catalog["toolq:core:noop"] = catalogRef{Tool: "other"}
	c.Lease.Until = time.Unix(9, 0)
	c.Wait.Owner = "other"
	c.Final.Status = sandbox.StatusFailed
	got, err := json.Marshal(r)
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got), "the original is untouched")
}

// TestRecordDue: a run is expired past its TTL unless a resume holds it,
// and is due at its expiry, or earlier for an autoResume run that could
// resume (half a lease after the write, or when its resume lease ends).
func TestRecordDue(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	const leaseTTL = 30 * time.Second
	exp := now.Add(time.Hour)
	waiting := func(auto, back bool) *record {
		r := &record{Status: runWaiting, AutoResume: auto, ExpiresAt: exp, Pending: []pendingCall{{CallID: "c1"}}}
		if back {
			r.Results = []callResult{{CallID: "c1"}}
		}
		return r
	}
	resuming := waiting(true, true)
	resuming.Status, resuming.Lease = runResuming, &lease{Owner: "w", Until: now.Add(time.Minute)}
	longLease := waiting(true, true)
	longLease.Status, longLease.Lease, longLease.ExpiresAt = runResuming, &lease{Owner: "w", Until: exp.Add(time.Minute)}, exp
	ended := waiting(true, true)
	ended.Status = runCompleted
	for name, c := range map[string]struct {
		r   *record
		due time.Time
	}{
		"waiting on a call":             {waiting(true, false), exp},
		"not autoResume, all back":      {waiting(false, true), exp},
		"autoResume, all back":          {waiting(true, true), now.Add(leaseTTL / 2)},
		"resuming under a lease":        {resuming, now.Add(time.Minute)},
		"a lease past the run's expiry": {longLease, exp.Add(time.Minute)},
		"ended":                         {ended, exp},
	} {
		require.Equal(t, c.due, c.r.dueAt(now, leaseTTL), name)
	}
	r := waiting(false, false)
	require.False(t, r.expired(exp.Add(-time.Millisecond)))
	require.True(t, r.expired(exp))
	require.False(t, longLease.expired(exp), "a resume holding the run keeps it")
	require.True(t, longLease.expired(exp.Add(time.Minute)))
}

// TestRecentRecordsKeepTheNewest: the remembered records are counted with
// their snapshots and stay within recentMaxBytes by letting the oldest go;
// a record put again counts as new, and a dropped one no longer counts.
func TestRecentRecordsKeepTheNewest(t *testing.T) {
	t.Parallel()
	var rr recentRecords
	const snap = 1 << 20
	rec := func() *record { return &record{Snapshot: make([]byte, 10, snap)} }
	key := func(i int) string { return "s1.r" + strconv.Itoa(i) }
	for i := range 40 {
		rr.put(key(i), rec(), 1000, uint64(i+1))
		if i == 30 {
			rr.put(key(0), rec(), 1000, 100) // r0 again: now newer than r1…r30
		}
	}
	require.LessOrEqual(t, rr.bytes, recentMaxBytes)
	held := recentMaxBytes / (snap + 1000) // r0 and the newest held-1 others
	require.Len(t, rr.by, held)
	for i := 1; i < 40; i++ {
		_, _, ok := rr.get(key(i))
		require.Equal(t, i >= 40-(held-1), ok, "r%d", i)
	}
	_, _, ok := rr.get(key(0))
	require.True(t, ok, "r0, put again, is among the newest")
	rr.drop(key(39))
	require.Equal(t, (held-1)*(snap+1000), rr.bytes)
	require.LessOrEqual(t, len(rr.order), 2*len(rr.by)+64)

	// An older revision never replaces a newer one.
	rr.put(key(38), rec(), 1000, 1)
	_, rev, ok := rr.get(key(38))
	require.True(t, ok)
	require.Equal(t, uint64(39), rev)
}
