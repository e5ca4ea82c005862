package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

// BatchOpts are the optional knobs of SubmitBatch.
type BatchOpts struct {
	// Window is how many publishes may wait for their acknowledgement at
	// once; DefaultBatchWindow by default.
	Window int
	// OnAck, when set, is told each job's outcome in the order of jobs, as
	// soon as it and every job before it are acknowledged: err is nil for
	// a job the bus took, an ErrDuplicate error for one it already held,
	// or the reason it was refused. A caller keeps its place with it (a
	// rerun after a crash starts after the last index it was told of).
	OnAck func(i int, job *contracts.Job, err error)
}

// DefaultBatchWindow is SubmitBatch's publish window when BatchOpts names
// none: wide enough that the server stores a batch of them at a time
// while the oldest acknowledgements come back, and well under nats.go's
// limit of 4,000 outstanding asynchronous publishes a connection.
const DefaultBatchWindow = 1024

// BatchResult counts what a SubmitBatch did.
type BatchResult struct {
	// Submitted jobs were taken by the bus; Duplicates it already held
	// (an earlier run of the same batch within the duplicate window);
	// Failed were refused (Errors holds each, by index).
	Submitted, Duplicates, Failed int
	Errors                        map[int]error
}

// SubmitBatch enqueues jobs with asynchronous publishes, at most
// opts.Window waiting for their acknowledgement at once, which is how a
// pipeline submits many jobs at close to JetStream's publish rate. Each job
// is validated first (a job that fails validation is counted as Failed and
// not sent) and, like Submit, published with its id as Nats-Msg-Id, so a
// batch submitted again within the duplicate window enqueues nothing twice.
// Jobs with no session get the producer's. It returns when every publish
// was answered, or when ctx ends (then with ctx's error and the counts so
// far).
func (p *Producer) SubmitBatch(ctx context.Context, jobs []*contracts.Job, opts *BatchOpts) (*BatchResult, error) {
	var o BatchOpts
	if opts != nil {
		o = *opts
	}
	if o.Window <= 0 {
		o.Window = DefaultBatchWindow
	}
	res := &BatchResult{Errors: map[int]error{}}
	type sent struct {
		i   int
		job *contracts.Job
		ack jetstream.PubAckFuture
		err error
	}
	pending := make([]sent, 0, o.Window)
	report := func(s sent, err error) {
		switch {
		case err == nil:
			res.Submitted++
		case errors.Is(err, ErrDuplicate):
			res.Duplicates++
		default:
			res.Failed++
			res.Errors[s.i] = err
		}
		if o.OnAck != nil {
			o.OnAck(s.i, s.job, err)
		}
	}
	// drain waits for the oldest pending publishes until at most keep are
	// left, reporting them in order.
	drain := func(keep int) error {
		for len(pending) > keep {
			s := pending[0]
			pending = pending[1:]
			if s.err != nil {
				report(s, s.err)
				continue
			}
			select {
			case ack := <-s.ack.Ok():
				if ack.Duplicate {
					report(s, fmt.Errorf("%w: %s", ErrDuplicate, s.job.ID))
				} else {
					report(s, nil)
				}
			case err := <-s.ack.Err():
				report(s, fmt.Errorf("producer: submit %s: %w", s.job.ID, err))
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	type check struct {
		lanes bool
		err   error
	}
	served := map[string]check{}
	tp := TraceParentFrom(ctx)
	for i, job := range jobs {
		if job.Session == "" {
			job.Session = p.cfg.Session
		}
		if job.CreatedAt.IsZero() {
			job.CreatedAt = nowUTC()
		}
		s := sent{i: i, job: job}
		msg, err := p.batchMsg(job)
		if err == nil && tp != "" {
			msg.Header = nats.Header{bus.HeaderTraceParent: []string{tp}}
		}
		if err == nil {
			key := p.cfg.Subjects.JobAt(job.Tool, job.Priority)
			c, seen := served[key]
			if !seen {
				cctx, cancel := p.withTimeout(ctx)
				c.lanes, c.err = p.checkServed(cctx, job.Tool, job.Priority)
				cancel()
				served[key] = c
			}
			err = c.err
			msg.Subject = p.subject(job, c.lanes)
		}
		if err == nil {
			s.ack, err = p.js.PublishMsgAsync(msg, jetstream.WithMsgID(contracts.DedupID(job)))
		}
		s.err = err
		pending = append(pending, s)
		if err := drain(o.Window - 1); err != nil {
			return res, err
		}
	}
	if err := drain(0); err != nil {
		return res, err
	}
	return res, nil
}

// batchMsg validates job and builds its message, as SubmitJob does.
func (p *Producer) batchMsg(job *contracts.Job) (*nats.Msg, error) {
	if err := job.Validate(); err != nil {
		return nil, err
	}
	if len(job.Input) > 0 && !json.Valid(job.Input) {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "input is not valid JSON")
	}
	data, err := json.Marshal(job)
	if err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "job cannot be encoded: %v", err)
	}
	return &nats.Msg{Data: data}, nil // the subject is set once the tool is checked
}

// subject is the subject job goes on: its session's lane when the tool's
// workers take lanes, its level's plain subject otherwise.
func (p *Producer) subject(job *contracts.Job, lanes bool) string {
	if lanes {
		return p.cfg.Subjects.SessionJob(job)
	}
	return p.cfg.Subjects.JobAt(job.Tool, job.Priority)
}

func nowUTC() time.Time { return time.Now().UTC() }
