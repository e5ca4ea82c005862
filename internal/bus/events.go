package bus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// HeaderTraceParent carries W3C trace context on jobs and events.
const HeaderTraceParent = "traceparent"

// Events publishes and reads job events. Every write of an event is
// conditional on the last sequence of the job's event subject, so that once a
// terminal event is written nothing else can follow it, and two writers (a
// worker finishing and a producer cancelling) cannot both end a job.
type Events struct {
	js       jetstream.JetStream
	stream   jetstream.Stream
	subjects contracts.Subjects
}

// NewEvents binds to the events stream, which must exist (see Ensure).
func NewEvents(ctx context.Context, js jetstream.JetStream, subjects contracts.Subjects) (*Events, error) {
	st, err := js.Stream(ctx, subjects.EventsStream())
	if err != nil {
		return nil, fmt.Errorf("bus: events stream %s: %w", subjects.EventsStream(), err)
	}
	return &Events{js: js, stream: st, subjects: subjects}, nil
}

// ErrConflict is returned by Publish when the job's event subject moved past
// the expected sequence: another writer got there first.
var ErrConflict = errors.New("bus: event subject moved on")

// Publish writes ev for its job, expecting expectSeq to be the last sequence
// on the job's event subject (0: no event yet). It returns the sequence of
// the stored event. A duplicate (same event id inside the window) is not an
// error and returns the original sequence.
func (e *Events) Publish(ctx context.Context, ev *contracts.Event, expectSeq uint64, traceparent string) (uint64, error) {
	data, err := contracts.EncodeEvent(ev)
	if err != nil {
		return 0, fmt.Errorf("bus: encode event: %w", err)
	}
	msg := &nats.Msg{Subject: e.subjects.Event(ev.Data.Session, ev.Data.JobID), Data: data, Header: nats.Header{}}
	if traceparent != "" {
		msg.Header.Set(HeaderTraceParent, traceparent)
	}
	ack, err := e.js.PublishMsg(ctx, msg,
		jetstream.WithMsgID(ev.ID),
		jetstream.WithExpectLastSequencePerSubject(expectSeq))
	if err != nil {
		if IsWrongLastSequence(err) {
			return 0, ErrConflict
		}
		return 0, fmt.Errorf("bus: publish event %s: %w", ev.ID, err)
	}
	return ack.Sequence, nil
}

// Last returns the last event of a job and its stream sequence; (nil, 0, nil)
// when the job has none.
func (e *Events) Last(ctx context.Context, session, jobID string) (*contracts.Event, uint64, error) {
	raw, err := e.stream.GetLastMsgForSubject(ctx, e.subjects.Event(session, jobID))
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, 0, nil
		}
		return nil, 0, fmt.Errorf("bus: last event of %s: %w", jobID, err)
	}
	ev, err := contracts.DecodeEvent(raw.Data)
	if err != nil {
		return nil, raw.Sequence, fmt.Errorf("bus: stored event of %s: %w", jobID, err)
	}
	return ev, raw.Sequence, nil
}
