package bus

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// ExpiryConfig describes one follower of a bucket's expiry markers.
type ExpiryConfig struct {
	// Bucket is the KV bucket (created with LimitMarkerTTL).
	Bucket string
	// Durable names the consumer every process shares, so each marker is
	// handled once.
	Durable string
	// Expired is called with the key of each entry JetStream removed
	// because its TTL ran out; an error hands the marker back for a retry.
	Expired func(ctx context.Context, key string) error
	Logger  *slog.Logger
}

// FollowExpiries consumes the MaxAge markers JetStream writes when an entry
// of cfg.Bucket outlives its TTL. It returns once consuming; consumption
// stops when lctx ends, and wg (if set) is done after that.
func FollowExpiries(ctx, lctx context.Context, js jetstream.JetStream, cfg ExpiryConfig, wg *sync.WaitGroup) error {
	prefix := contracts.KVSubject(cfg.Bucket, "")
	cons, err := js.CreateOrUpdateConsumer(ctx, contracts.KVStream(cfg.Bucket), jetstream.ConsumerConfig{
		Durable:       cfg.Durable,
		Description:   "expiry of " + cfg.Bucket + " entries",
		FilterSubject: contracts.KVSubject(cfg.Bucket, ">"),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverNewPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    10,
		// Only the marker header is read: every write of the bucket passes
		// through this consumer, and its body (a run record may carry an
		// inline snapshot) would be copied to a worker for nothing.
		HeadersOnly: true,
	})
	if err != nil {
		return fmt.Errorf("bus: expiry consumer on %s: %w", cfg.Bucket, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if m.Headers().Get(jetstream.MarkerReasonHeader) == "MaxAge" {
			key := strings.TrimPrefix(m.Subject(), prefix)
			if err := cfg.Expired(lctx, key); err != nil {
				log.Warn("expiry not handled; retrying", slog.String("bucket", cfg.Bucket), slog.String("key", key), slog.Any("err", err))
				_ = m.NakWithDelay(time.Second)
				return
			}
		}
		_ = m.Ack()
	})
	if err != nil {
		return fmt.Errorf("bus: expiry consumer on %s: %w", cfg.Bucket, err)
	}
	if wg != nil {
		wg.Add(1)
	}
	go func() {
		if wg != nil {
			defer wg.Done()
		}
		<-lctx.Done()
		cc.Stop()
	}()
	return nil
}
