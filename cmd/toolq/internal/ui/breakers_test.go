package ui

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/cmd/toolq/internal/operator"
	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/tools/codeexec"
	"github.com/toolq/toolq/worker"
)

// codeExecWorker starts a worker whose code_execution calls xai at
// baseURL, its breakers (one fault opens them) kept in the breakers bucket
// as `toolq worker` keeps them, with the bucket's TTL ttl.
func codeExecWorker(t *testing.T, nc *nats.Conn, baseURL string, ttl time.Duration) (*worker.Worker, *operator.BreakerBoard) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	w, err := worker.New(nc, &worker.Config{Logger: log, StopTimeout: time.Second})
	require.NoError(t, err)
	var tool *codeexec.CodeExecution
	board, err := operator.NewBreakerBoard(testutil.JetStream(t, nc), &operator.BreakerBoardConfig{
		Worker: w.Name(), TTL: ttl, Logger: log,
		States: func() map[string]map[string]string {
			out := map[string]map[string]string{}
			for _, p := range tool.Status() {
				for model, st := range p.Breakers {
					if out[p.Provider] == nil {
						out[p.Provider] = map[string]string{}
					}
					out[p.Provider][model] = string(st)
				}
			}
			return out
		},
	})
	require.NoError(t, err)
	cfg := &codeexec.Config{
		Providers: map[string]*codeexec.ProviderConfig{"xai": {APIKey: "test-key", BaseURL: baseURL}},
		Retry:     codeexec.RetryConfig{MaxAttempts: 1},
		Breaker:   codeexec.BreakerConfig{Failures: 1, OpenTimeout: time.Hour},
		Logger:    log,
		OnBreakerChange: func(c codeexec.BreakerChange) {
			board.Changed(c.Provider, c.Model, string(c.To), c.At, c.RetryAfterMs)
		},
	}
	tool, err = codeexec.Register(w, cfg)
	require.NoError(t, err)
	require.NoError(t, w.Use(board))
	return w, board
}

// breakersOf reads the breakers bucket until ok accepts it (the bus is
// polled, with a deadline).
func breakersOf(t *testing.T, nc *nats.Conn, ok func([]contracts.BreakerRecord) bool) []contracts.BreakerRecord {
	t.Helper()
	var recs []contracts.BreakerRecord
	require.Eventually(t, func() bool {
		var err error
		recs, err = operator.ReadBreakers(testutil.Context(t, 5*time.Second), testutil.JetStream(t, nc), contracts.Subjects{})
		require.NoError(t, err)
		return ok(recs)
	}, 20*time.Second, 20*time.Millisecond)
	return recs
}

// TestBreakersPage: a breaker that opened before the console started is
// on its breakers page, read from the bucket the worker keeps; the
// worker's stop removes its rows, and a worker that dies (its connection
// gone, no stop) loses them with the bucket's TTL.
func TestBreakersPage(t *testing.T) {
	t.Parallel()
	// A provider endpoint that fails every call, in xAI's error shape.
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"message":"overloaded","type":"server_error"}}`))
	}))
	t.Cleanup(provider.Close)
	srv := testutil.StartJetStream(t)
	ctx := testutil.Context(t, 60*time.Second)
	wnc := srv.Connect(t)
	w, _ := codeExecWorker(t, wnc, provider.URL, 2*time.Second)
	require.NoError(t, w.Start(ctx))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = w.Stop(sctx)
		}
	})

	nc := srv.Connect(t)
	p, err := producer.New(nc, &producer.Config{Session: "agent", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	_, err = p.SubmitCodeExecution(ctx, &contracts.CodeExecutionInput{Task: "add 2 and 2", Provider: "xai", Model: "grok-test"}, nil)
	require.NoError(t, err)
	token := contracts.BreakerWorkerToken(w.Name())
	recs := breakersOf(t, nc, func(r []contracts.BreakerRecord) bool {
		return len(r) == 1 && len(r[0].Breakers) == 1 && r[0].Breakers[0].State == contracts.BreakerOpen
	})
	require.Equal(t, "xai", recs[0].Provider)
	require.Equal(t, token, recs[0].Worker)
	require.Equal(t, "grok-test", recs[0].Breakers[0].Model)
	require.False(t, recs[0].Breakers[0].Since.IsZero(), "when it opened")
	require.Equal(t, time.Hour.Milliseconds(), recs[0].Breakers[0].RetryAfterMs)

	// The console starts after the breaker opened: it shows it all the same.
	console, err := New(srv.Connect(t), &Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, console.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, console.Stop(sctx))
	})
	page := body(t, get(t, console.URL()+"breakers"))
	require.Contains(t, page, `<tr data-worker="`+token+`"><td data-label="Provider">xai</td><td data-label="Model">grok-test</td><td data-label="State" class="status s-open">open</td>`)
	require.Contains(t, page, "3600000 ms", "the probe's delay")

	// A stopped worker's rows go at once.
	require.NoError(t, w.Stop(ctx))
	stopped = true
	breakersOf(t, nc, func(r []contracts.BreakerRecord) bool { return len(r) == 0 })
	require.Contains(t, body(t, get(t, console.URL()+"breakers")), "No breakers")

	// A dead worker's rows go with the TTL: its board wrote them, then its
	// connection went away without a stop.
	dnc := srv.Connect(t)
	dead, err := operator.NewBreakerBoard(testutil.JetStream(t, dnc), &operator.BreakerBoardConfig{
		Worker: "dead.worker", TTL: 2 * time.Second, Logger: slog.New(slog.DiscardHandler),
		States: func() map[string]map[string]string {
			return map[string]map[string]string{"openai": {"gpt-test": contracts.BreakerOpen}}
		},
	})
	require.NoError(t, err)
	require.NoError(t, dead.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = dead.Stop(sctx) // its deletes fail: the connection is closed
	})
	breakersOf(t, nc, func(r []contracts.BreakerRecord) bool { return len(r) == 1 && r[0].Worker == "dead_worker" })
	require.Contains(t, body(t, get(t, console.URL()+"breakers")), `data-worker="dead_worker"`)
	dnc.Close()
	died := time.Now()
	breakersOf(t, nc, func(r []contracts.BreakerRecord) bool { return len(r) == 0 })
	t.Logf("a dead worker's breakers expired %v after its connection closed (TTL 2s)", time.Since(died).Round(10*time.Millisecond))
}
