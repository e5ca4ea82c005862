package operator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrStop, returned by a Read callback, ends the read early with nil.
var ErrStop = errors.New("operator: stop reading")

// ReadOpts are Read's optional settings.
type ReadOpts struct {
	// Newest reads only the newest this many messages of the stream
	// (before the filter); 0 reads from the first.
	Newest uint64
}

// Read calls fn for the messages of st on subjects, oldest first, up to
// the stream's last message when the read began, through an ordered
// consumer: ephemeral, no acks, so reading takes nothing out of a stream.
// Each fetch asks for no more than is left, so it ends with its last
// message and nothing outlives the read (the console reads on every page
// view). fn returning ErrStop ends the read with nil.
func Read(ctx context.Context, st jetstream.Stream, subjects []string, opts *ReadOpts, fn func(jetstream.Msg, *jetstream.MsgMetadata) error) error {
	var o ReadOpts
	if opts != nil {
		o = *opts
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Errorf("read: stream info: %w", err)
	}
	name := info.Config.Name
	last := info.State.LastSeq // messages stored after the read began are not looked at
	if info.State.Msgs == 0 {
		return nil
	}
	cc := jetstream.OrderedConsumerConfig{FilterSubjects: subjects, InactiveThreshold: time.Minute}
	if o.Newest > 0 && last > o.Newest {
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, max(last-o.Newest+1, info.State.FirstSeq)
	}
	cons, err := st.OrderedConsumer(ctx, cc)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	// A filter that matches nothing delivers nothing: the consumer's info
	// says so at once.
	ci, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	left := ci.NumPending
	for left > 0 {
		batch, err := cons.Fetch(int(min(left, 256)), jetstream.FetchMaxWait(2*time.Second)) //nolint:gosec // G115: at most 256
		if err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("read %s: %w", name, err)
			}
			if md.Sequence.Stream > last {
				return nil
			}
			if err := fn(m, md); err != nil {
				if errors.Is(err, ErrStop) {
					return nil
				}
				return err
			}
			if md.NumPending == 0 || md.Sequence.Stream == last {
				return nil
			}
			left = md.NumPending
		}
		if err := batch.Error(); err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		if got == 0 {
			return nil // the rest was deleted meanwhile
		}
	}
	return nil
}
