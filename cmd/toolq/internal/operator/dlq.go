package operator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

// MetaRequeuedFrom is the meta key a requeued job carries: the id of the
// job it was first submitted as (a requeue of a requeue keeps the first).
const MetaRequeuedFrom = "toolq.requeued_from"

// ErrNoDLQ is OpenDLQ's error when the DLQ stream does not exist yet.
var ErrNoDLQ = errors.New("no dead-letter stream")

// Filter selects dead letters; the zero Filter selects all of them.
type Filter struct {
	Tool, Session, Tenant string
	// Limit is how many at most, oldest first (0: no limit).
	Limit int
}

// Check refuses a filter with an invalid tool, session or tenant.
func (f *Filter) Check() error {
	if f.Tool != "" && !contracts.ValidTool(f.Tool) {
		return contracts.Errorf(contracts.CodeInvalidInput, "--tool %q is not a tool name", f.Tool)
	}
	if f.Session != "" && !contracts.ValidID(f.Session) {
		return contracts.Errorf(contracts.CodeInvalidInput, "--session %q is not a valid id", f.Session)
	}
	if f.Tenant != "" && !contracts.ValidID(f.Tenant) {
		return contracts.Errorf(contracts.CodeInvalidInput, "--tenant %q is not a valid id", f.Tenant)
	}
	if f.Limit < 0 {
		return contracts.Errorf(contracts.CodeInvalidInput, "--limit %d is negative", f.Limit)
	}
	return nil
}

// Narrowed reports whether f selects less than every dead letter by tool,
// session or tenant.
func (f *Filter) Narrowed() bool { return f.Tool != "" || f.Session != "" || f.Tenant != "" }

func (f *Filter) match(d *DeadLetter) bool {
	return (f.Session == "" || d.DL.Session == f.Session) && (f.Tenant == "" || d.DL.Tenant == f.Tenant)
}

// DeadLetter is one message of the DLQ stream.
type DeadLetter struct {
	Seq     uint64
	Subject string
	Stored  time.Time
	DL      contracts.DeadLetter
	// Bad is why the record could not be read (DL is then empty but Tool).
	Bad string
}

// DecodeDeadLetter reads the DLQ message at seq.
func DecodeDeadLetter(s contracts.Subjects, seq uint64, subject string, stored time.Time, data []byte) *DeadLetter {
	d := &DeadLetter{Seq: seq, Subject: subject, Stored: stored}
	if err := json.Unmarshal(data, &d.DL); err != nil {
		d.Bad = "unreadable dead-letter record: " + err.Error()
		d.DL = contracts.DeadLetter{}
	}
	if tool, ok := strings.CutPrefix(subject, s.DLQ("")); ok && d.DL.Tool == "" {
		d.DL.Tool = tool
	}
	return d
}

// DLQ is the DLQ stream of an operator's connection.
type DLQ struct {
	s      contracts.Subjects
	js     jetstream.JetStream
	stream jetstream.Stream
}

// OpenDLQ opens the DLQ stream; ErrNoDLQ when no worker made it yet.
func OpenDLQ(ctx context.Context, js jetstream.JetStream, s contracts.Subjects) (*DLQ, error) {
	st, err := js.Stream(ctx, s.DLQStream())
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("%w %s: start a worker or `toolq dev` first, which create toolq's streams", ErrNoDLQ, s.DLQStream())
		}
		return nil, err
	}
	return &DLQ{s: s, js: js, stream: st}, nil
}

// Walk calls fn for every dead letter f selects, oldest first, until f's
// limit or fn's error. It reads through an ordered consumer (ephemeral, no
// acks): the DLQ is a limits stream, so reading takes nothing out of it.
func (q *DLQ) Walk(ctx context.Context, f *Filter, fn func(*DeadLetter) error) error {
	s := q.s
	filter := s.DLQs()
	if f.Tool != "" {
		filter = s.DLQ(f.Tool)
	}
	n := 0
	err := Read(ctx, q.stream, []string{filter}, nil, func(m jetstream.Msg, md *jetstream.MsgMetadata) error {
		d := DecodeDeadLetter(s, md.Sequence.Stream, m.Subject(), md.Timestamp, m.Data())
		if !f.match(d) {
			return nil
		}
		if err := fn(d); err != nil {
			return err
		}
		if n++; f.Limit > 0 && n >= f.Limit {
			return ErrStop
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dlq: %w", err)
	}
	return nil
}

// Get returns the dead letter at seq, or nil when there is none.
func (q *DLQ) Get(ctx context.Context, seq uint64) (*DeadLetter, error) {
	raw, err := q.stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dlq: get %d: %w", seq, err)
	}
	return DecodeDeadLetter(q.s, raw.Sequence, raw.Subject, raw.Time, raw.Data), nil
}

// Find resolves SEQ|JOB_ID: a number names the dead letter at that
// sequence when there is one, anything else (or a number with no dead
// letter at it) the dead letters of that job id that f selects, of which
// there must be exactly one.
func (q *DLQ) Find(ctx context.Context, arg string, f *Filter) (*DeadLetter, error) {
	if seq, err := strconv.ParseUint(arg, 10, 64); err == nil && seq > 0 {
		d, err := q.Get(ctx, seq)
		if err != nil {
			return nil, err
		}
		if d != nil && (f.Tool == "" || d.DL.Tool == f.Tool) && f.match(d) {
			return d, nil
		}
	}
	if !contracts.ValidID(arg) {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "%q is neither a dead letter's sequence nor a job id", arg)
	}
	var found []*DeadLetter
	all := *f
	all.Limit = 0
	err := q.Walk(ctx, &all, func(d *DeadLetter) error {
		if d.DL.JobID == arg {
			found = append(found, d)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch len(found) {
	case 0:
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "no dead letter %s (neither a sequence nor a job id in %s)", arg, q.s.DLQStream())
	case 1:
		return found[0], nil
	}
	seqs := make([]string, len(found))
	for i, d := range found {
		seqs[i] = fmt.Sprintf("%d (tenant %s, session %s)", d.Seq, OrDash(d.DL.Tenant), d.DL.Session)
	}
	return nil, contracts.Errorf(contracts.CodeInvalidInput, "job id %s names %d dead letters: %s; name one by its sequence, or narrow with --tenant and --session",
		arg, len(found), strings.Join(seqs, ", "))
}

// Row is a dead letter as a list shows it.
type Row struct {
	Seq      uint64            `json:"seq"`
	Time     time.Time         `json:"time"`
	Tool     string            `json:"tool"`
	Tenant   string            `json:"tenant,omitempty"`
	Session  string            `json:"session,omitempty"`
	JobID    string            `json:"jobId,omitempty"`
	Attempts int               `json:"attempts"`
	Error    *contracts.Error  `json:"error,omitempty"`
	Worker   string            `json:"worker,omitempty"`
	Problems map[string]string `json:"problems,omitempty"`
}

// Row is d as a list shows it.
func (d *DeadLetter) Row() Row {
	r := Row{
		Seq: d.Seq, Time: d.DL.Time, Tool: d.DL.Tool, Tenant: d.DL.Tenant, Session: d.DL.Session,
		JobID: d.DL.JobID, Attempts: d.DL.Attempts, Worker: d.DL.Worker,
	}
	if r.Time.IsZero() {
		r.Time = d.Stored
	}
	if d.DL.Error != nil {
		r.Error = &contracts.Error{Code: d.DL.Error.Code, Message: d.DL.Error.Message}
	}
	if d.Bad != "" {
		r.Problems = map[string]string{"record": d.Bad}
	}
	return r
}

// RequeueID is the id a dead letter's job is requeued under: the first id
// of the job (a requeue of a requeue starts again from it) with _rq<seq>,
// the dead letter's sequence. The same dead letter always gives the same
// id, two dead letters never do; an id that would be too long keeps a hash
// of its start.
func RequeueID(job *contracts.Job, seq uint64) string {
	base := job.ID
	if from := job.Meta[MetaRequeuedFrom]; contracts.ValidID(from) {
		base = from
	}
	suffix := "_rq" + strconv.FormatUint(seq, 10)
	if len(base)+len(suffix) > 128 {
		sum := sha256.Sum256([]byte(base))
		base = base[:128-len(suffix)-9] + "_" + hex.EncodeToString(sum[:4])
	}
	return base + suffix
}

// RequeueJob is the job a dead letter is requeued as, or why it cannot be.
func RequeueJob(d *DeadLetter) (*contracts.Job, error) {
	dl := &d.DL
	switch {
	case d.Bad != "":
		return nil, fmt.Errorf("dead letter %d: %s", d.Seq, d.Bad)
	case dl.JobTruncated:
		return nil, fmt.Errorf("dead letter %d keeps only the first bytes of a %d-byte job message: nothing whole to requeue", d.Seq, dl.JobSize)
	case dl.JobID == "":
		return nil, fmt.Errorf("dead letter %d holds a message that was no readable job: nothing to requeue (purge it)", d.Seq)
	}
	job, err := contracts.DecodeJob(dl.Job)
	if err != nil {
		return nil, fmt.Errorf("dead letter %d: its job does not decode: %w", d.Seq, err)
	}
	if job.ID != dl.JobID || job.Tool != dl.Tool || job.Session != dl.Session {
		return nil, fmt.Errorf("dead letter %d: its job (%s, %s, %s) is not the one the record names (%s, %s, %s)",
			d.Seq, job.ID, job.Tool, job.Session, dl.JobID, dl.Tool, dl.Session)
	}
	if dl.Tenant != "" && !contracts.ValidID(dl.Tenant) {
		return nil, fmt.Errorf("dead letter %d names the invalid tenant %q", d.Seq, dl.Tenant)
	}
	job.Tenant = dl.Tenant
	if job.Priority, err = contracts.ParsePriority(string(dl.Priority)); err != nil {
		return nil, fmt.Errorf("dead letter %d: %w", d.Seq, err)
	}
	orig := job.ID
	if from := job.Meta[MetaRequeuedFrom]; contracts.ValidID(from) {
		orig = from
	}
	job.ID = RequeueID(job, d.Seq)
	if _, ok := job.Meta[MetaRequeuedFrom]; ok || len(job.Meta) < 32 {
		meta := make(map[string]string, len(job.Meta)+1)
		for k, v := range job.Meta {
			meta[k] = v
		}
		meta[MetaRequeuedFrom] = orig
		job.Meta = meta
	}
	if err := job.Validate(); err != nil {
		return nil, fmt.Errorf("dead letter %d: the requeued job: %w", d.Seq, err)
	}
	return job, nil
}

// Requeued is what Requeue did with one dead letter.
type Requeued struct {
	Seq        uint64 `json:"seq"`
	JobID      string `json:"jobId"`
	RequeuedAs string `json:"requeuedAs"`
	Tenant     string `json:"tenant,omitempty"`
	Session    string `json:"session"`
	Subject    string `json:"subject"`
	// Already says the job was on the bus from an earlier requeue (a
	// duplicate publish, or its events exist): nothing was enqueued this
	// time.
	Already bool `json:"already,omitempty"`
}

// Requeue republishes d's job and then deletes d. The job goes to its
// tool's subject of its tenant, level and session lane (JobSubject) under
// RequeueID, with the id as
// Nats-Msg-Id, so a rerun after a crash between the publish and the delete
// is a duplicate the server drops; past the duplicate window, a job that
// already has events is not published again.
func (q *DLQ) Requeue(ctx context.Context, d *DeadLetter, events *bus.Events) (*Requeued, error) {
	job, err := RequeueJob(d)
	if err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "%v", err)
	}
	s := q.s
	r := &Requeued{Seq: d.Seq, JobID: d.DL.JobID, RequeuedAs: job.ID, Tenant: job.Tenant, Session: job.Session}
	ev, _, err := events.LastIn(ctx, job.Tenant, job.Session, job.ID)
	if err != nil {
		return nil, fmt.Errorf("dead letter %d: reading the events of %s: %w", d.Seq, job.ID, err)
	}
	if ev != nil {
		r.Already = true
	} else {
		subject, dup, err := PublishJob(ctx, q.js, s, job)
		if err != nil {
			return nil, fmt.Errorf("dead letter %d: %w; the dead letter is kept", d.Seq, err)
		}
		r.Already, r.Subject = dup, subject
	}
	if r.Subject == "" {
		r.Subject = JobSubject(ctx, q.js, s, job)
	}
	// Only now that the bus holds the job: a crash before this line leaves
	// the dead letter, and a rerun publishes the same id again.
	if err := q.stream.DeleteMsg(ctx, d.Seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return r, fmt.Errorf("dead letter %d: requeued as %s, but not deleted: %w (a rerun will not enqueue it twice)", d.Seq, job.ID, err)
	}
	return r, nil
}

// Served reports whether a worker has ever consumed tool in tenant's jobs
// stream (its durable consumer exists).
func (q *DLQ) Served(ctx context.Context, tenant, tool string) bool {
	stream := q.s.JobsStream()
	if tenant != "" {
		stream = q.s.TenantJobsStream(tenant)
	}
	_, err := q.js.Consumer(ctx, stream, q.s.ConsumerName(tool))
	return err == nil
}

// Delete removes the dead letter at seq; false when it was gone already
// (aged out, another purge).
func (q *DLQ) Delete(ctx context.Context, seq uint64) (bool, error) {
	err := q.stream.DeleteMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("dlq purge: delete %d: %w", seq, err)
	}
	return true, nil
}

// PurgeUpTo deletes every dead letter below seq.
func (q *DLQ) PurgeUpTo(ctx context.Context, seq uint64) error {
	if err := q.stream.Purge(ctx, jetstream.WithPurgeSequence(seq)); err != nil {
		return fmt.Errorf("dlq purge: %w", err)
	}
	return nil
}

// OrDash is s, or "-" for an empty table cell.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Purge deletes exactly the dead letters at seqs (ascending, as Walk
// found them) and returns how many it deleted; one gone meanwhile is not
// counted. With upTo, seqs is every dead letter up to its last, and one
// request deletes them all; one that arrived after the walk stays.
func (q *DLQ) Purge(ctx context.Context, seqs []uint64, upTo bool) (int, error) {
	if len(seqs) == 0 {
		return 0, nil
	}
	if upTo {
		if err := q.PurgeUpTo(ctx, seqs[len(seqs)-1]+1); err != nil {
			return 0, err
		}
		return len(seqs), nil
	}
	purged := 0
	for _, seq := range seqs {
		ok, err := q.Delete(ctx, seq)
		if err != nil {
			return purged, fmt.Errorf("%w (%d deleted)", err, purged)
		}
		if ok {
			purged++
		}
	}
	return purged, nil
}

// PublishJob publishes job, validated, on JobSubject (its tool's subject
// of its tenant, level and session lane) with its id as Nats-Msg-Id, as
// the operator does: the toolq account reaches every tenant's jobs
// stream. It returns the subject; dup says the bus held the id already
// (nothing was enqueued).
func PublishJob(ctx context.Context, js jetstream.JetStream, s contracts.Subjects, job *contracts.Job) (subject string, dup bool, err error) {
	if err := job.Validate(); err != nil {
		return "", false, err
	}
	if job.Tenant != "" && !contracts.ValidID(job.Tenant) {
		return "", false, contracts.Errorf(contracts.CodeInvalidInput, "tenant %q is not a valid id", job.Tenant)
	}
	data, err := json.Marshal(job)
	if err != nil {
		return "", false, err
	}
	subject = JobSubject(ctx, js, s, job)
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data}, jetstream.WithMsgID(contracts.DedupID(job)))
	if err != nil {
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			hint := "is a worker or `toolq dev` running?"
			if job.Tenant != "" {
				hint = "is tenant " + job.Tenant + " still registered (toolq tenant ls)?"
			}
			return "", false, fmt.Errorf("no stream takes %s (%s)", subject, hint)
		}
		return "", false, fmt.Errorf("publish: %w", err)
	}
	return subject, ack.Duplicate, nil
}

// JobSubject is the subject the operator puts job on: as a producer
// would, its tool's subject of its tenant and level on its session's lane
// (contracts.Subjects.TenantSessionJob; the plain one for a guarded tool),
// unless the tool's workers take only the plain subject of the level
// (workers from before lanes: the level's consumer filters no lane and
// lane 1 has no consumer of its own). A level nobody consumes yet gets
// the lane, as a tenant's producer's job does.
func JobSubject(ctx context.Context, js jetstream.JetStream, s contracts.Subjects, job *contracts.Job) string {
	lane := s.TenantSessionJob(job.Tenant, job)
	plain := s.TenantJobAt(job.Tenant, job.Tool, job.Priority)
	if lane == plain {
		return plain
	}
	stream := s.JobsStream()
	if job.Tenant != "" {
		stream = s.TenantJobsStream(job.Tenant)
	}
	cons, err := js.Consumer(ctx, stream, s.ConsumerNameAt(job.Tool, job.Priority))
	if err != nil {
		return lane
	}
	if slices.Contains(cons.CachedInfo().Config.FilterSubjects, s.TenantJobLane(job.Tenant, job.Tool, job.Priority, 1)) {
		return lane
	}
	if _, err := js.Consumer(ctx, stream, s.ConsumerNameLane(job.Tool, job.Priority, 1)); err == nil {
		return lane
	}
	return plain
}
