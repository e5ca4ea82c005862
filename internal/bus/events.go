package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"

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
	nc       *nats.Conn // set by NewImportedEvents, then stream is nil
}

// NewEvents binds to the events stream, which must exist (see Ensure).
func NewEvents(ctx context.Context, js jetstream.JetStream, subjects contracts.Subjects) (*Events, error) {
	st, err := js.Stream(ctx, subjects.EventsStream())
	if err != nil {
		return nil, fmt.Errorf("bus: events stream %s: %w", subjects.EventsStream(), err)
	}
	return &Events{js: js, stream: st, subjects: subjects}, nil
}

// NewImportedEvents reads events on a tenant account's connection, where
// the events stream itself is out of reach and only the direct gets of the
// tenant's own event subjects are imported (deploy/nats/tenants.conf). Last
// works; Publish fails with ErrReadOnly, since tenants write no events.
func NewImportedEvents(nc *nats.Conn, subjects contracts.Subjects) *Events {
	return &Events{nc: nc, subjects: subjects}
}

// ErrReadOnly is returned by Publish on Events made by NewImportedEvents.
var ErrReadOnly = errors.New("bus: events are read-only on a tenant account")

// ErrConflict is returned by Publish when the job's event subject moved past
// the expected sequence: another writer got there first.
var ErrConflict = errors.New("bus: event subject moved on")

// Publish writes ev for its job, expecting expectSeq to be the last sequence
// on the job's event subject (0: no event yet). It returns the sequence of
// the stored event. A duplicate (same event id inside the window) is not an
// error and returns the original sequence.
func (e *Events) Publish(ctx context.Context, ev *contracts.Event, expectSeq uint64, traceparent string) (uint64, error) {
	if e.stream == nil {
		return 0, ErrReadOnly
	}
	data, err := contracts.EncodeEvent(ev)
	if err != nil {
		return 0, fmt.Errorf("bus: encode event: %w", err)
	}
	subject := e.subjects.TenantEvent(ev.Data.Tenant, ev.Data.Session, ev.Data.JobID)
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	if traceparent != "" {
		msg.Header.Set(HeaderTraceParent, traceparent)
	}
	ack, err := e.js.PublishMsg(ctx, msg,
		// Event ids repeat across tenants (job ids do): deduplicate per tenant.
		jetstream.WithMsgID(contracts.TenantKey(ev.Data.Tenant, ev.ID)),
		jetstream.WithExpectLastSequencePerSubject(expectSeq))
	if err != nil {
		if IsWrongLastSequence(err) {
			return 0, ErrConflict
		}
		return 0, fmt.Errorf("bus: publish event %s: %w", ev.ID, err)
	}
	return ack.Sequence, nil
}

// Last returns the last event of a job of the default tenant (or, on a
// tenant account, of the connection's tenant) and its stream sequence;
// (nil, 0, nil) when the job has none.
func (e *Events) Last(ctx context.Context, session, jobID string) (*contracts.Event, uint64, error) {
	return e.LastIn(ctx, "", session, jobID)
}

// LastIn is Last for a job of tenant.
func (e *Events) LastIn(ctx context.Context, tenant, session, jobID string) (*contracts.Event, uint64, error) {
	var (
		raw *jetstream.RawStreamMsg
		err error
	)
	if e.stream == nil {
		raw, err = e.directLast(ctx, e.subjects.TenantEvent(tenant, session, jobID))
	} else {
		raw, err = e.stream.GetLastMsgForSubject(ctx, e.subjects.TenantEvent(tenant, session, jobID))
	}
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

// directLast asks for the last message on subject with a direct get by
// subject, the one JetStream request a tenant account may make on the
// events stream.
func (e *Events) directLast(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	resp, err := e.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+e.subjects.EventsStream()+"."+subject, nil)
	if err != nil {
		return nil, err
	}
	switch resp.Header.Get("Status") {
	case "":
	case "404":
		return nil, jetstream.ErrMsgNotFound
	default:
		return nil, fmt.Errorf("direct get: %s %s", resp.Header.Get("Status"), resp.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(resp.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("direct get: bad sequence header: %w", err)
	}
	return &jetstream.RawStreamMsg{Subject: resp.Header.Get(jetstream.SubjectHeader), Sequence: seq, Header: resp.Header, Data: resp.Data}, nil
}
