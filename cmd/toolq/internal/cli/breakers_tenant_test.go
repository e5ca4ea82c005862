package cli

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/cmd/toolq/internal/operator"
	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
)

// TestBreakersBucketTenants: on the accounts of deploy/nats/tenants.conf,
// the breakers bucket a worker keeps is read by the operator (the toolq
// account) and by no tenant: a tenant's user reads no record of it.
func TestBreakersBucketTenants(t *testing.T) {
	t.Parallel()
	b := startTenantBus(t)
	ctx := testutil.Context(t, 30*time.Second)
	onc, err := nats.Connect(b.operator)
	require.NoError(t, err)
	t.Cleanup(onc.Close)
	ojs, err := jetstream.New(onc)
	require.NoError(t, err)
	board, err := operator.NewBreakerBoard(ojs, &operator.BreakerBoardConfig{
		Worker: "w1", Logger: slog.New(slog.DiscardHandler),
		States: func() map[string]map[string]string {
			return map[string]map[string]string{"xai": {"grok-test": contracts.BreakerOpen}}
		},
	})
	require.NoError(t, err)
	require.NoError(t, board.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, board.Stop(sctx))
	})
	require.Eventually(t, func() bool {
		recs, err := operator.ReadBreakers(ctx, ojs, contracts.Subjects{})
		require.NoError(t, err)
		return len(recs) == 1 && recs[0].Breakers[0].State == contracts.BreakerOpen
	}, 10*time.Second, 20*time.Millisecond, "the operator reads it")

	for _, tenant := range []string{"ACME", "GLOBEX"} {
		opt, err := nats.NkeyOptionFromSeed(b.seeds[tenant])
		require.NoError(t, err)
		refused := make(chan error, 8)
		tnc, err := nats.Connect(b.url, opt, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case refused <- err:
			default:
			}
		}))
		require.NoError(t, err)
		tjs, err := jetstream.New(tnc)
		require.NoError(t, err)
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		recs, err := operator.ReadBreakers(tctx, tjs, contracts.Subjects{})
		cancel()
		require.Empty(t, recs, "%s reads no breaker", tenant)
		require.Error(t, err, "%s: the bucket is not there for a tenant account", tenant)
		select {
		case err := <-refused:
			require.ErrorContains(t, err, `Permissions Violation for Publish to "$JS.API.STREAM.INFO.KV_toolq_breakers"`, tenant)
		case <-ctx.Done():
			require.Fail(t, "no permissions violation", tenant)
		}
		tnc.Close()
	}
}
