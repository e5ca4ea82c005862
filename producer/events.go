package producer

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// ReadOpts are the optional knobs of ReadEvents.
type ReadOpts struct {
	// Follow keeps reading new events until ctx ends; otherwise ReadEvents
	// returns once it has read every stored event.
	Follow bool
	// JobID narrows the read to one job.
	JobID string
}

// ReadEvents calls fn with every stored event of session, oldest first, and
// with new ones as they arrive when opts.Follow is set.
func (p *Producer) ReadEvents(ctx context.Context, session string, opts *ReadOpts, fn func(*contracts.Event) error) error {
	if err := contracts.ValidateID("session", session); err != nil {
		return err
	}
	if p.cfg.TenantAccount {
		return errors.New("producer: reading events is not available on a tenant account; use Await")
	}
	var o ReadOpts
	if opts != nil {
		o = *opts
	}
	filter := p.cfg.Subjects.SessionEvents(session)
	if o.JobID != "" {
		if err := contracts.ValidateID("job id", o.JobID); err != nil {
			return err
		}
		filter = p.cfg.Subjects.Event(session, o.JobID)
	}
	// Setting up can fail for a moment (a cluster electing a leader, a
	// reconnect); like Await, ReadEvents tries again until ctx ends.
	var (
		cons jetstream.Consumer
		info *jetstream.ConsumerInfo
	)
	err := p.retrying(ctx, "read events of "+session, func() error {
		cctx, cancel := p.withTimeout(ctx)
		defer cancel()
		var err error
		if cons, err = p.js.OrderedConsumer(cctx, p.cfg.Subjects.EventsStream(), jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{filter},
			DeliverPolicy:  jetstream.DeliverAllPolicy,
		}); err != nil {
			return err
		}
		info, err = cons.Info(cctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("producer: read events: %w", err)
	}
	if info.NumPending == 0 && !o.Follow {
		return nil
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("producer: read events: %w", err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("producer: read events: %w", err)
		}
		ev, derr := contracts.DecodeEvent(m.Data())
		if derr == nil {
			if err := fn(ev); err != nil {
				if errors.Is(err, ErrStop) {
					return nil
				}
				return err
			}
		}
		if !o.Follow {
			md, err := m.Metadata()
			if err == nil && md.NumPending == 0 {
				return nil
			}
		}
	}
}
