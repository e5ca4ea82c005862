package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// QueueRow is one tool's queue in one jobs stream.
type QueueRow struct {
	Kind   string `json:"kind"` // "queue"
	Tenant string `json:"tenant,omitempty"`
	Tool   string `json:"tool"`
	Stream string `json:"stream"`
	// Messages is the tool's jobs in the stream: waiting, running, or
	// waiting for a retry (a work queue drops a job when it is acked).
	Messages uint64 `json:"messages"`
	// Pending is the jobs no worker has taken yet; AckPending those taken
	// and not yet finished (running, or waiting for a retry); Redelivered
	// those delivered more than once; Waiting the pull requests of idle
	// workers. Without a consumer nobody ever served the tool here.
	Pending     uint64 `json:"pending"`
	AckPending  int    `json:"ackPending"`
	Redelivered int    `json:"redelivered"`
	Waiting     int    `json:"waiting"`
	Consumer    bool   `json:"consumer"`
}

// QueuedJob is one job message of a queue.
type QueuedJob struct {
	Kind    string    `json:"kind"` // "job"
	Tenant  string    `json:"tenant,omitempty"`
	Tool    string    `json:"tool"`
	Seq     uint64    `json:"seq"`
	JobID   string    `json:"jobId,omitempty"`
	Session string    `json:"session,omitempty"`
	Queued  time.Time `json:"queued"`
	AgeMs   int64     `json:"ageMs"`
	// State is "queued" (no worker took it yet) or "delivered" (a worker
	// took it: running, waiting for its next attempt, or for a slot).
	State string `json:"state"`
	// Priority is the job's level, "" for normal.
	Priority string `json:"priority,omitempty"`
}

// JobsStream is one jobs stream: the default tenant's or a named tenant's.
type JobsStream struct {
	Tenant string
	Name   string
}

// Streams lists the jobs streams on the bus: TOOLQ_JOBS and each
// TOOLQ_TENANT_<tenant>_JOBS, the default tenant first.
func Streams(ctx context.Context, js jetstream.JetStream, s contracts.Subjects) ([]JobsStream, error) {
	var out []JobsStream
	prefix := strings.TrimSuffix(s.TenantJobsStream("X"), "X_JOBS")
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		if name == s.JobsStream() {
			out = append(out, JobsStream{Name: name})
			continue
		}
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		if tenant, ok := strings.CutSuffix(rest, "_JOBS"); ok && contracts.ValidID(tenant) {
			out = append(out, JobsStream{Tenant: tenant, Name: name})
		}
	}
	if err := names.Err(); err != nil {
		return nil, fmt.Errorf("jobs: list streams: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out, nil
}

// Queues reads one stream's queues: jobs per tool subject and the tools'
// consumers. It reads infos only.
func Queues(ctx context.Context, st jetstream.Stream, s contracts.Subjects, js JobsStream) ([]QueueRow, map[string]*jetstream.ConsumerInfo, error) {
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(s.TenantJobs(js.Tenant)))
	if err != nil {
		return nil, nil, fmt.Errorf("jobs: stream %s: %w", js.Name, err)
	}
	rows := map[string]*QueueRow{}
	row := func(tool string) *QueueRow {
		r, ok := rows[tool]
		if !ok {
			r = &QueueRow{Kind: "queue", Tenant: js.Tenant, Tool: tool, Stream: js.Name}
			rows[tool] = r
		}
		return r
	}
	for subject, n := range info.State.Subjects {
		if tool := s.TenantToolOf(js.Tenant, subject); tool != "" {
			row(tool).Messages += n // every priority level's subject
		}
	}
	consumers := map[string]*jetstream.ConsumerInfo{}
	list := st.ListConsumers(ctx)
	for ci := range list.Info() {
		tool, marks, ok := cutConsumer(ci.Name)
		if !ok || !contracts.ValidTool(tool) || !workerMarks(marks) {
			continue
		}
		consumers[ci.Name] = ci
		r := row(tool)
		r.Consumer = true
		r.Pending += ci.NumPending
		r.AckPending += ci.NumAckPending
		r.Redelivered += ci.NumRedelivered
		r.Waiting += ci.NumWaiting
	}
	if err := list.Err(); err != nil {
		return nil, nil, fmt.Errorf("jobs: consumers of %s: %w", js.Name, err)
	}
	out := make([]QueueRow, 0, len(rows))
	for _, r := range rows {
		if !r.Consumer {
			r.Pending = r.Messages
		}
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tool < out[j].Tool })
	return out, consumers, nil
}

// StreamQueues is one jobs stream as ListQueues read it, for WalkQueue.
type StreamQueues struct {
	JS        JobsStream
	Stream    jetstream.Stream
	Consumers map[string]*jetstream.ConsumerInfo
}

// ListQueues reads the queues of every jobs stream (of tenant only, when
// not ""), the rows of tool only when not "". A tenant with no jobs stream
// is invalid input.
func ListQueues(ctx context.Context, js jetstream.JetStream, s contracts.Subjects, tenant, tool string) ([]QueueRow, []StreamQueues, error) {
	streams, err := Streams(ctx, js, s)
	if err != nil {
		return nil, nil, err
	}
	var all []QueueRow
	var read []StreamQueues
	for _, jst := range streams {
		if tenant != "" && jst.Tenant != tenant {
			continue
		}
		st, err := js.Stream(ctx, jst.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, nil, fmt.Errorf("jobs: stream %s: %w", jst.Name, err)
		}
		rows, consumers, err := Queues(ctx, st, s, jst)
		if err != nil {
			return nil, nil, err
		}
		for _, r := range rows {
			if tool == "" || r.Tool == tool {
				all = append(all, r)
			}
		}
		read = append(read, StreamQueues{JS: jst, Stream: st, Consumers: consumers})
	}
	if tenant != "" && len(read) == 0 {
		return nil, nil, contracts.Errorf(contracts.CodeInvalidInput, "no jobs stream for tenant %s (toolq tenant ls)", tenant)
	}
	return all, read, nil
}

// WalkQueue reads up to limit job messages of tool in one stream, every
// priority level in turn (high, normal, low), oldest first in each.
func WalkQueue(ctx context.Context, sq *StreamQueues, s contracts.Subjects, tool string, limit int, fn func(QueuedJob) error) (int, error) {
	n := 0
	for _, prio := range contracts.Priorities {
		left := 0
		if limit > 0 {
			if left = limit - n; left <= 0 {
				break
			}
		}
		got, err := walkLevel(ctx, sq, s, tool, prio, left, fn)
		n += got
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// cutConsumer splits a worker's consumer name, worker_<tool>~high~s1, into
// its tool and the marks of its level and lane; ok is false for a name
// that is not a worker's.
func cutConsumer(name string) (tool, marks string, ok bool) {
	rest, ok := strings.CutPrefix(name, "worker_")
	if !ok {
		return "", "", false
	}
	rest, marks, _ = strings.Cut(rest, "~")
	return strings.ReplaceAll(rest, ":", "."), marks, true
}

// workerMarks reports whether marks is what follows a tool in a worker's
// consumer name (contracts.Subjects.ConsumerNameLane): nothing, a level
// (high, low), a lane (s1..s3), or a level and a lane.
func workerMarks(marks string) bool {
	if marks == "" {
		return true
	}
	level, lane, both := strings.Cut(marks, "~")
	isLevel := level == string(contracts.PriorityHigh) || level == string(contracts.PriorityLow)
	isLane := func(m string) bool {
		return len(m) == 2 && m[0] == 's' && m[1] >= '1' && int(m[1]-'0') < contracts.SessionLanes
	}
	if both {
		return isLevel && isLane(lane)
	}
	return isLevel || isLane(level)
}

// walkLevel reads up to limit job messages of tool at level prio in one
// stream, each session lane in turn, oldest first in each.
func walkLevel(ctx context.Context, sq *StreamQueues, s contracts.Subjects, tool string, prio contracts.Priority, limit int, fn func(QueuedJob) error) (int, error) {
	n := 0
	for lane := range contracts.SessionLanes {
		left := 0
		if limit > 0 {
			if left = limit - n; left <= 0 {
				break
			}
		}
		got, err := walkLane(ctx, sq, s, tool, prio, lane, left, fn)
		n += got
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// walkLane reads up to limit job messages of tool at level prio on lane in
// one stream, oldest first, by direct reads of the stream by sequence:
// nothing is consumed or acknowledged, and no consumer is made (a
// work-queue stream refuses a second consumer whose filter overlaps the
// worker's). A job counts as delivered by its lane's consumer, or its
// level's when the lanes are folded.
func walkLane(ctx context.Context, sq *StreamQueues, s contracts.Subjects, tool string, prio contracts.Priority, lane, limit int, fn func(QueuedJob) error) (int, error) {
	subject := s.TenantJobLane(sq.JS.Tenant, tool, prio, lane)
	ci := sq.Consumers[s.ConsumerNameLane(tool, prio, lane)]
	if ci == nil {
		ci = sq.Consumers[s.ConsumerNameAt(tool, prio)]
	}
	level := ""
	if prio != contracts.PriorityNormal {
		level = string(prio)
	}
	var seq uint64
	n := 0
	now := time.Now()
	for limit == 0 || n < limit {
		raw, err := sq.Stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("jobs: read %s: %w", subject, err)
		}
		seq = raw.Sequence + 1
		var head struct {
			ID      string `json:"id"`
			Session string `json:"session"`
		}
		_ = json.Unmarshal(raw.Data, &head)
		j := QueuedJob{
			Kind: "job", Tenant: sq.JS.Tenant, Tool: tool, Seq: raw.Sequence, Queued: raw.Time,
			AgeMs: now.Sub(raw.Time).Milliseconds(), State: "queued", Priority: level,
		}
		if contracts.ValidID(head.ID) {
			j.JobID = head.ID
		}
		if contracts.ValidID(head.Session) {
			j.Session = head.Session
		}
		if ci != nil && raw.Sequence <= ci.Delivered.Stream {
			j.State = "delivered"
		}
		if err := fn(j); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
