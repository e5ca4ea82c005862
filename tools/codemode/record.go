package codemode

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/sandbox"
)

// Run statuses in a record.
const (
	runWaiting   = "waiting"
	runResuming  = "resuming"
	runCompleted = "completed"
	runFailed    = "failed"
)

// record is a code-mode run as kept in the toolq_runs bucket under its
// runKey: <session>.<run id> for the default tenant, <tenant>.<session>.<run
// id> for a named one. Every write is conditional on the revision read and
// carries when the run is next due (dueAt), for the timers and the sweep
// that expire it or resume it when nothing else does.
type record struct {
	RunID   string `json:"runId"`
	Session string `json:"session"`
	// Tenant is the tenant of the exec job's subject ("" for the default
	// one), never of a body. load sets it from the key it read.
	Tenant string `json:"tenant,omitempty"`
	// Priority is the level of the exec job's subject (never of a body);
	// the run's nested calls go at it. Empty for normal.
	Priority contracts.Priority `json:"priority,omitempty"`
	// ExecJob is the code_mode.exec job (its id is the run id).
	ExecJob string `json:"execJob"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	// Pending are the nested calls the guest waits on; Results the ones
	// that came back, in arrival order.
	Pending []pendingCall `json:"pending,omitempty"`
	Results []callResult  `json:"results,omitempty"`
	// Snapshot is inline when small; otherwise SnapshotObject names it in
	// the object store.
	Snapshot       []byte `json:"snapshot,omitempty"`
	SnapshotObject string `json:"snapshotObject,omitempty"`
	SnapshotBytes  int    `json:"snapshotBytes"`

	AutoResume  bool           `json:"autoResume,omitempty"`
	RestartSafe bool           `json:"restartSafe,omitempty"`
	Limits      sandbox.Limits `json:"limits"`
	TTLSeconds  int64          `json:"ttlSeconds"`
	Lease       *lease         `json:"lease,omitempty"`
	Wait        *lease         `json:"wait,omitempty"`
	// Waits counts the waiting events written to the exec job (n of the next).
	Waits       int       `json:"waits"`
	SuspendedAt time.Time `json:"suspendedAt"`
	SuspendedMs float64   `json:"suspendedMs"`
	ExpiresAt   time.Time `json:"expiresAt"`
	TraceParent string    `json:"traceparent,omitempty"`
	// Final is the run's last CodeModeResult once it completed or failed.
	Final *sandbox.Result `json:"final,omitempty"`
	// Catalog maps the ids of the run's tools to how they are called.
	Catalog map[string]catalogRef `json:"catalog"`
	// A restartSafe run keeps its code and every result it was given, so
	// it can be rebuilt by replay when its snapshot is lost or was made by
	// another engine build.
	Code     string       `json:"code,omitempty"`
	Language string       `json:"language,omitempty"`
	History  []callResult `json:"history,omitempty"`

	// snapJSON is the "snapshot" member's JSON made for the Snapshot whose
	// first byte is snapOf and length snapLen: an inline snapshot is most
	// of a record and is written unchanged by most of the run's writes.
	snapJSON []byte
	snapOf   *byte
	snapLen  int
}

// clone returns a copy of r that shares nothing r's writers change in
// place: its slices and pointers are copied (the JSON and byte values in
// them are never changed in place, only replaced).
func (r *record) clone() *record {
	c := *r
	c.Pending = slices.Clone(r.Pending)
	c.Results = slices.Clone(r.Results)
	c.History = slices.Clone(r.History)
	c.Catalog = maps.Clone(r.Catalog)
	if r.Lease != nil {
		l := *r.Lease
		c.Lease = &l
	}
	if r.Wait != nil {
		w := *r.Wait
		c.Wait = &w
	}
	if r.Final != nil {
		f := *r.Final
		c.Final = &f
	}
	return &c
}

// marshal encodes r as JSON. The inline snapshot's member (its base64) is
// made once for each snapshot and appended to the rest of the record.
func (r *record) marshal() ([]byte, error) {
	snap := r.Snapshot
	r.Snapshot = nil
	data, err := json.Marshal(r)
	r.Snapshot = snap
	if err != nil || len(snap) == 0 {
		return data, err
	}
	if r.snapOf != &snap[0] || r.snapLen != len(snap) || r.snapJSON == nil {
		enc := base64.StdEncoding
		m := make([]byte, 0, len(`"snapshot":""`)+enc.EncodedLen(len(snap)))
		m = append(m, `"snapshot":"`...)
		m = enc.AppendEncode(m, snap)
		r.snapJSON, r.snapOf, r.snapLen = append(m, '"'), &snap[0], len(snap)
	}
	out := make([]byte, 0, len(data)+1+len(r.snapJSON))
	out = append(out, data[:len(data)-1]...) // the object without its closing brace
	if len(data) > 2 {
		out = append(out, ',')
	}
	out = append(out, r.snapJSON...)
	return append(out, '}'), nil
}

type pendingCall struct {
	CallID    string          `json:"callId"`
	ToolID    string          `json:"toolId"`
	Source    string          `json:"source,omitempty"`
	JobID     string          `json:"jobId,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	Submitted bool            `json:"submitted"`
	// Token is the call's secret (contracts.NewCallToken), carried in the
	// nested job's parent and echoed by its result; empty in records
	// written before tokens, whose results are taken without one.
	Token string `json:"token,omitempty"`
}

type callResult struct {
	CallID string          `json:"callId"`
	Value  json.RawMessage `json:"value,omitempty"`
	Error  string          `json:"error,omitempty"`
	At     time.Time       `json:"at"`
}

// catalogRef is what a run needs to call one of its tools.
type catalogRef struct {
	Tool         string          `json:"tool,omitempty"`
	Source       string          `json:"source"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	SideEffects  bool            `json:"sideEffects,omitempty"`
}

type lease struct {
	Owner string    `json:"owner"`
	Until time.Time `json:"until"`
	// Token names one resume of the owner: two triggers on one worker
	// must not both resume the run.
	Token string `json:"token,omitempty"`
}

func (l *lease) heldBy(other string, now time.Time) bool {
	return l != nil && l.Owner != other && now.Before(l.Until)
}

// belongsTo reports whether r is the record of the run that its key names:
// a record names only its own run, and a snapshot object only under its own
// key (putSnapshot's name), so no record can lead a resume or a clean-up
// to another tenant's or session's snapshot.
func (r *record) belongsTo(tenant, session, runID string) bool {
	return r.Session == session && r.RunID == runID && (r.Tenant == "" || r.Tenant == tenant) &&
		(r.SnapshotObject == "" || r.SnapshotObject == runKey(tenant, session, runID))
}

func (r *record) ended() bool { return r.Status == runCompleted || r.Status == runFailed }

func (r *record) pending(callID string) *pendingCall {
	for i := range r.Pending {
		if r.Pending[i].CallID == callID {
			return &r.Pending[i]
		}
	}
	return nil
}

func (r *record) hasResult(callID string) bool {
	for _, res := range r.Results {
		if res.CallID == callID {
			return true
		}
	}
	return false
}

// idle: waiting, or left resuming by a worker whose lease ran out.
func (r *record) idle(now time.Time) bool {
	return r.Status == runWaiting || (r.Status == runResuming && (r.Lease == nil || !now.Before(r.Lease.Until)))
}

// expired: the run outlived its TTL and no resume holds it. An expired run
// is, to everyone but the expiry, a run that no longer exists, as when the
// server removed its record at the TTL.
func (r *record) expired(now time.Time) bool {
	return !now.Before(r.ExpiresAt) && !r.Lease.heldBy("", now)
}

// dueAt is when a run written at now is next due for the sweep: its
// expiry, or, for an autoResume run that could resume (every call back),
// half a lease after the write or when its resume lease runs out, if
// earlier. Nothing is due earlier without another write, which sets it
// again.
func (r *record) dueAt(now time.Time, leaseTTL time.Duration) time.Time {
	due := r.ExpiresAt
	if r.Lease != nil && r.Lease.Until.After(due) {
		due = r.Lease.Until // expired only once no resume holds it
	}
	if r.AutoResume && !r.ended() && r.allBack() {
		at := now.Add(leaseTTL / 2)
		if r.Status == runResuming && r.Lease != nil && r.Lease.Until.After(at) {
			at = r.Lease.Until
		}
		if at.Before(due) {
			due = at
		}
	}
	return due
}

// resumable: idle, and every pending call has its result (or the run only
// yielded).
func (r *record) resumable(now time.Time) bool {
	return r.idle(now) && r.allBack()
}

// allBack: every pending call has its result.
func (r *record) allBack() bool {
	for _, p := range r.Pending {
		if !r.hasResult(p.CallID) {
			return false
		}
	}
	return true
}

// runKey is the key of a run in the runs bucket: <session>.<run id> for
// the default tenant (as before tenants), <tenant>.<session>.<run id> for
// a named one. Ids contain no dots, so the number of tokens tells the two
// apart, a wildcard "<session>.*" matches only the default tenant's keys,
// and no tenant's key can equal another's.
func runKey(tenant, session, runID string) string {
	return contracts.TenantKey(tenant, session+"."+runID)
}

// parseRunKey is the inverse of runKey; ok is false for any other key.
func parseRunKey(key string) (tenant, session, runID string, ok bool) {
	parts := strings.Split(key, ".")
	switch len(parts) {
	case 2:
		session, runID = parts[0], parts[1]
	case 3:
		tenant, session, runID = parts[0], parts[1], parts[2]
		if !contracts.ValidID(tenant) {
			return "", "", "", false
		}
	default:
		return "", "", "", false
	}
	return tenant, session, runID, contracts.ValidID(session) && contracts.ValidID(runID)
}

// bindSession is what a run's snapshots are bound to besides its run id
// and step: the session, scoped to the tenant (the session itself for the
// default tenant, so snapshots made before tenants still restore). A
// snapshot of one tenant's run is refused by a resume as another tenant's,
// even under the same run id and session name.
func bindSession(tenant, session string) string { return contracts.TenantKey(tenant, session) }

// store reads and writes run records and snapshots.
type store struct {
	js    jetstream.JetStream
	kv    jetstream.KeyValue
	runs  jetstream.Stream // the bucket's stream, for the suspended-runs count
	obj   jetstream.ObjectStore
	subj  string // $KV.<bucket>.
	limit int    // inline snapshot bytes
	// leaseTTL is the code mode's LeaseTTL, for when a run is due.
	leaseTTL time.Duration
	// due are this worker's timers for runs due soon (written here, or
	// seen by its sweep).
	due *dueTimers
	// recent are the records this worker last wrote or read, for a result
	// that comes back to the worker that suspended its run.
	recent recentRecords
}

var errNoRun = errors.New("codemode: no such run")

func (s *store) load(ctx context.Context, tenant, session, runID string) (*record, uint64, error) {
	e, err := s.kv.Get(ctx, runKey(tenant, session, runID))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, 0, errNoRun
		}
		return nil, 0, fmt.Errorf("codemode: load run %s: %w", runID, err)
	}
	r, err := decodeRecord(e.Value(), tenant, session, runID)
	if err != nil {
		return nil, 0, err
	}
	if r.expired(time.Now()) {
		return nil, 0, errNoRun
	}
	s.recent.put(e.Key(), r.clone(), len(e.Value()), e.Revision())
	return r, e.Revision(), nil
}

// decodeRecord reads the record of a run from data.
func decodeRecord(data []byte, tenant, session, runID string) (*record, error) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("codemode: run record %s: %w", runID, err)
	}
	if !r.belongsTo(tenant, session, runID) {
		return nil, fmt.Errorf("codemode: run record %s: it names another run", runID)
	}
	r.Tenant = tenant
	return &r, nil
}

// loadRecent is load from this worker's last write or read of the record,
// without a round trip and without decoding it again; ok is false when it
// has none. The record may be out of date: only a write at its revision
// (which the bus refuses if anything was written since) may act on it.
func (s *store) loadRecent(tenant, session, runID string) (*record, uint64, bool) {
	r, rev, ok := s.recent.get(runKey(tenant, session, runID))
	if !ok || !r.belongsTo(tenant, session, runID) || r.expired(time.Now()) {
		return nil, 0, false
	}
	r.Tenant = tenant
	return r, rev, true
}

// errStale is returned by save when the record changed since it was read.
var errStale = errors.New("codemode: run record changed")

// save writes r if the record is still at rev (0: it must not exist). It
// returns the new revision.
func (s *store) save(ctx context.Context, r *record, rev uint64) (uint64, error) {
	data, err := r.marshal()
	if err != nil {
		return 0, err
	}
	return s.write(ctx, r.clone(), data, rev)
}

// write publishes the bytes of r (a copy no one else holds) if the record
// is still at rev. The entry carries when the run is next due (dueHeader)
// and a TTL of expiryGrace past the run's expiry: the run is expired by
// this worker's timer or a sweep, and the server removes the entry only
// when no worker has done so by then.
func (s *store) write(ctx context.Context, r *record, data []byte, rev uint64) (uint64, error) {
	key := runKey(r.Tenant, r.Session, r.RunID)
	now := time.Now()
	due := r.dueAt(now, s.leaseTTL)
	msg := &nats.Msg{Subject: s.subj + key, Data: data, Header: nats.Header{dueHeader: []string{strconv.FormatInt(due.UnixMilli(), 10)}}}
	ttl := max(r.ExpiresAt.Sub(now), time.Second) + expiryGrace
	ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(ttl))
	if err != nil {
		if bus.IsWrongLastSequence(err) {
			s.recent.drop(key)
			return 0, errStale
		}
		return 0, fmt.Errorf("codemode: save run %s: %w", r.RunID, err)
	}
	s.recent.put(key, r, len(data), ack.Sequence)
	s.due.set(key, due, now)
	return ack.Sequence, nil
}

// pendingWrite is a record write under way (saveBegin).
type pendingWrite struct {
	done chan struct{}
	rev  uint64
	err  error
}

// wait returns the write's outcome once it is known; it may be called more
// than once.
func (p *pendingWrite) wait() (uint64, error) {
	<-p.done
	return p.rev, p.err
}

// saveBegin is save without waiting for the bus's answer: r is encoded
// now (the caller may change it afterwards) and written in the background.
// The caller must wait for the outcome before it returns, and before
// anything it does is seen by others.
func (s *store) saveBegin(ctx context.Context, r *record, rev uint64) *pendingWrite {
	p := &pendingWrite{done: make(chan struct{})}
	data, err := r.marshal()
	if err != nil {
		p.err = err
		close(p.done)
		return p
	}
	written := r.clone()
	go func() {
		defer close(p.done)
		p.rev, p.err = s.write(ctx, written, data, rev)
	}()
	// Let the write go out before the caller goes on: the caller's next
	// step is the guest's slice, compiled code the scheduler cannot take
	// the processor from, and on a busy machine the write would otherwise
	// wait for the slice to end instead of crossing the bus beside it.
	runtime.Gosched()
	return p
}

// putSnapshot stores a snapshot for r: inline when small, else as an object.
func (s *store) putSnapshot(ctx context.Context, r *record, snap []byte) error {
	r.SnapshotBytes = len(snap)
	if len(snap) <= s.limit {
		r.Snapshot, r.SnapshotObject = snap, ""
		return nil
	}
	name := runKey(r.Tenant, r.Session, r.RunID)
	if _, err := s.obj.PutBytes(ctx, name, snap); err != nil {
		return fmt.Errorf("codemode: store snapshot of %s: %w", r.RunID, err)
	}
	r.Snapshot, r.SnapshotObject = nil, name
	return nil
}

func (s *store) getSnapshot(ctx context.Context, r *record) ([]byte, error) {
	if r.SnapshotObject == "" {
		if len(r.Snapshot) == 0 {
			return nil, errors.New("codemode: run has no snapshot")
		}
		return r.Snapshot, nil
	}
	b, err := s.obj.GetBytes(ctx, r.SnapshotObject)
	if err != nil {
		return nil, fmt.Errorf("codemode: load snapshot of %s: %w", r.RunID, err)
	}
	return b, nil
}

// dropSnapshot deletes a run's snapshot object, if it has one.
func (s *store) dropSnapshot(ctx context.Context, name string) {
	if name != "" {
		_ = s.obj.Delete(ctx, name)
	}
}

// recentMaxBytes bounds the memory of the records a worker remembers, as
// recentRecords counts it.
const recentMaxBytes = 16 << 20

// recentRecords remembers, by key, the last record a worker wrote or read
// of each run with its revision: when the result of a run's nested call
// comes back to the worker that suspended the run (the usual case), the
// worker takes the run with a compare-and-set write at that revision
// instead of reading the record first. A record that moved on elsewhere
// fails that write, and the worker reads it as before. Records of other
// tenants are other keys: a tenant's result finds only its own runs.
// Records are kept decoded (a copy of their own, handed out as copies).
// Each is counted by the length of its JSON (about what its remembered
// JSON members take) plus its snapshot's capacity, and the oldest go first
// once the bound is passed: a worker with many suspended runs keeps the
// recent ones, whose results are the likeliest to come back soon.
type recentRecords struct {
	mu    sync.Mutex
	by    map[string]recentRecord
	order []recentKey // by put, oldest first; entries since replaced are skipped
	gen   uint64
	bytes int
}

type recentRecord struct {
	rec  *record
	size int
	rev  uint64
	gen  uint64
}

type recentKey struct {
	key string
	gen uint64
}

// put remembers rec, which the caller gives up, at rev; jsonSize is the
// length of its JSON.
func (r *recentRecords) put(key string, rec *record, jsonSize int, rev uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = map[string]recentRecord{}
	}
	if old, ok := r.by[key]; ok {
		if old.rev > rev {
			return
		}
		r.bytes -= old.size
	}
	r.gen++
	size := jsonSize + cap(rec.Snapshot)
	r.by[key] = recentRecord{rec: rec, size: size, rev: rev, gen: r.gen}
	r.order = append(r.order, recentKey{key: key, gen: r.gen})
	r.bytes += size
	for r.bytes > recentMaxBytes && len(r.order) > 0 {
		oldest := r.order[0]
		r.order = r.order[1:]
		if e, ok := r.by[oldest.key]; ok && e.gen == oldest.gen {
			r.bytes -= e.size
			delete(r.by, oldest.key)
		}
	}
	if len(r.order) > 2*len(r.by)+64 {
		// Mostly replaced or dropped entries: keep the live ones, in order.
		live := make([]recentKey, 0, len(r.by))
		for _, k := range r.order {
			if e, ok := r.by[k.key]; ok && e.gen == k.gen {
				live = append(live, k)
			}
		}
		r.order = live
	}
}

// get returns a copy of the record remembered under key.
func (r *recentRecords) get(key string) (*record, uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.by[key]
	if !ok {
		return nil, 0, false
	}
	return e.rec.clone(), e.rev, true
}

func (r *recentRecords) drop(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.by[key]; ok {
		r.bytes -= old.size
		delete(r.by, key)
	}
}
