package codeexec_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/codeexec"
)

func breakerConfig(openTimeout time.Duration) func(*codeexec.Config) {
	return func(c *codeexec.Config) {
		c.Retry.MaxAttempts = 1
		c.Breaker.Failures = 5
		c.Breaker.OpenTimeout = openTimeout
	}
}

// A provider failing 5× opens its breaker; jobs then fail over at once
// without a request to it, and a job that allows no failover fails fast,
// retryable, saying when to come back.
func TestBreakerOpensAndJobsFailOver(t *testing.T) {
	t.Parallel()
	b := setup(t, breakerConfig(time.Hour))
	b.fakes["xai"].set(status(500, ""))
	in := map[string]any{"task": "t", "failover": []string{"gemini"}}
	for i := 0; i < 5; i++ {
		require.True(t, b.tool.Available("xai"), "job %d", i)
		d, err := b.run(t, in)
		require.Nil(t, err)
		require.Equal(t, "gemini", d.Provider, "the result says which provider answered")
		require.Len(t, d.Failover, 1)
		require.Equal(t, "xai", d.Failover[0].Provider)
		require.Equal(t, "server", d.Failover[0].Kind)
		require.Equal(t, string(contracts.CodeProviderUnavailable), d.Failover[0].Code)
	}
	require.Equal(t, []string{"xai/grok-4.6:closed->open"}, b.changes.transitions())
	require.Equal(t, int64(time.Hour/time.Millisecond), b.changes.list[0].RetryAfterMs)
	require.False(t, b.tool.Available("xai"))
	require.True(t, b.tool.Accepting(), "gemini still answers")
	require.Equal(t, int32(5), b.fakes["xai"].hits.Load())

	d, err := b.run(t, in)
	require.Nil(t, err)
	require.Equal(t, "gemini", d.Provider)
	require.Equal(t, codeexec.KindBreakerOpen, d.Failover[0].Kind)
	require.Equal(t, int32(5), b.fakes["xai"].hits.Load(), "an open breaker sends nothing")

	start := time.Now()
	_, err = b.run(t, map[string]any{"task": "t"})
	require.Less(t, time.Since(start), time.Second, "one fast failure")
	require.NotNil(t, err)
	require.Equal(t, contracts.CodeProviderUnavailable, err.Code)
	require.True(t, err.Retryable)
	f := failureOf(t, err)
	require.Equal(t, codeexec.KindBreakerOpen, f.Kind)
	require.Greater(t, f.RetryAfterMs, int64(59*60*1000))
	require.LessOrEqual(t, f.RetryAfterMs, int64(60*60*1000))
	require.Equal(t, 0, f.Attempts)
	require.Equal(t, int32(5), b.fakes["xai"].hits.Load())
}

// After the open timeout one half-open probe goes through; its success
// closes the breaker, its failure opens it again.
func TestBreakerHalfOpenProbe(t *testing.T) {
	t.Parallel()
	// A 1ns open timeout makes the breaker half-open on the next call
	// after it opened, without waiting.
	b := setup(t, breakerConfig(time.Nanosecond))
	b.fakes["xai"].set(status(502, ""))
	for i := 0; i < 5; i++ {
		_, err := b.run(t, map[string]any{"task": "t"})
		require.NotNil(t, err)
	}
	require.Equal(t, []string{"xai/grok-4.6:closed->open"}, b.changes.transitions())

	// The probe fails: open again.
	_, err := b.run(t, map[string]any{"task": "t"})
	require.NotNil(t, err)
	require.Equal(t, int32(6), b.fakes["xai"].hits.Load(), "the probe was sent")
	require.Equal(t, []string{
		"xai/grok-4.6:closed->open",
		"xai/grok-4.6:open->half-open",
		"xai/grok-4.6:half-open->open",
	}, b.changes.transitions())

	// The provider recovers: the next probe closes the breaker.
	b.fakes["xai"].set(ok("xai", "Mean: 42. Verified."))
	d, err := b.run(t, map[string]any{"task": "t"})
	require.Nil(t, err)
	require.Equal(t, "xai", d.Provider)
	require.Equal(t, []string{
		"xai/grok-4.6:closed->open",
		"xai/grok-4.6:open->half-open",
		"xai/grok-4.6:half-open->open",
		"xai/grok-4.6:open->half-open",
		"xai/grok-4.6:half-open->closed",
	}, b.changes.transitions())
	require.True(t, b.tool.Available("xai"))
}

// Only provider faults count: 4xx, 429, answers without text and
// cancellations neither open the breaker nor reset its count.
func TestBreakerCountsOnlyProviderFaults(t *testing.T) {
	t.Parallel()
	b := setup(t, breakerConfig(time.Hour))
	for _, h := range []http.HandlerFunc{
		status(400, ""), status(401, ""), status(403, ""), status(404, ""), status(429, ""),
		raw(`{"output":[]}`),
	} {
		b.fakes["xai"].set(h)
		for i := 0; i < 6; i++ {
			_, err := b.run(t, map[string]any{"task": "t"})
			require.NotNil(t, err)
		}
	}
	// Cancelled jobs.
	b.fakes["xai"].set(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	for i := 0; i < 6; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		_, err := b.runCtx(ctx, t, map[string]any{"task": "t"})
		cancel()
		require.NotNil(t, err)
		require.Equal(t, contracts.CodeTimeout, err.Code)
	}
	require.Empty(t, b.changes.transitions())
	require.True(t, b.tool.Available("xai"))

	// Four faults, a 400 in between (not a success), one more fault: open.
	b.fakes["xai"].set(sequence(status(500, ""), status(500, ""), status(500, ""), status(500, ""), status(400, ""), status(500, "")))
	for i := 0; i < 6; i++ {
		_, err := b.run(t, map[string]any{"task": "t"})
		require.NotNil(t, err)
	}
	require.Equal(t, []string{"xai/grok-4.6:closed->open"}, b.changes.transitions())
}

// A malformed body and a dropped connection are faults.
func TestBreakerCountsMalformedAndTransport(t *testing.T) {
	t.Parallel()
	b := setup(t, breakerConfig(time.Hour))
	b.fakes["xai"].set(sequence(raw(`{"output":`), drop, raw(`nope`), drop, raw(`[]`)))
	for i := 0; i < 5; i++ {
		_, err := b.run(t, map[string]any{"task": "t"})
		require.NotNil(t, err)
	}
	require.False(t, b.tool.Available("xai"))
}

// Breakers are per provider and model.
func TestBreakerPerModel(t *testing.T) {
	t.Parallel()
	b := setup(t, breakerConfig(time.Hour))
	b.fakes["xai"].set(func(w http.ResponseWriter, r *http.Request) {
		if b.fakes["xai"].hits.Load() <= 5 {
			status(500, "")(w, r)
			return
		}
		ok("xai", "Mean: 42. Verified.")(w, r)
	})
	for i := 0; i < 5; i++ {
		_, err := b.run(t, map[string]any{"task": "t", "model": "grok-4.3"})
		require.NotNil(t, err)
	}
	require.Equal(t, []string{"xai/grok-4.3:closed->open"}, b.changes.transitions())
	// The gate looks at the breakers of the models jobs use, not at the
	// default model's: every one of them is open.
	require.False(t, b.tool.Available("xai"))
	st := b.tool.Status()
	require.Len(t, st, 4)
	require.Equal(t, codeexec.ProviderStatus{
		Provider: "xai", Enabled: true, Model: "grok-4.6", Available: false,
		Breakers: map[string]codeexec.BreakerState{"grok-4.3": codeexec.BreakerOpen},
	}, st[0])
	_, err := b.run(t, map[string]any{"task": "t", "model": "grok-4.3"})
	require.Equal(t, codeexec.KindBreakerOpen, failureOf(t, err).Kind)
	require.Contains(t, err.Message, "last failure: xai: server (HTTP 500)", "the upstream cause is kept")
	require.Equal(t, 500, failureOf(t, err).Status)
	d, err := b.run(t, map[string]any{"task": "t"})
	require.Nil(t, err)
	require.Equal(t, "grok-4.6", d.Model)
	require.True(t, b.tool.Available("xai"), "the default model's breaker is closed")
}

func TestAcceptingFalseWhenEveryBreakerIsOpen(t *testing.T) {
	t.Parallel()
	off := false
	b := setup(t, breakerConfig(time.Hour), func(c *codeexec.Config) {
		c.Providers["openai"].Enabled = &off
		c.Providers["anthropic"].Enabled = &off
	})
	b.fakes["xai"].set(status(503, ""))
	b.fakes["gemini"].set(status(503, ""))
	for i := 0; i < 5; i++ {
		_, err := b.run(t, map[string]any{"task": "t", "failover": []string{"gemini"}})
		require.NotNil(t, err)
		require.Equal(t, "xai", failureOf(t, err).Provider, "the first provider's failure is the job's")
		require.Len(t, failureOf(t, err).Failover, 1)
	}
	require.False(t, b.tool.Available("xai"))
	require.False(t, b.tool.Available("gemini"))
	require.False(t, b.tool.Accepting())
}

// Failover also covers bad and missing credentials, but not a refused
// request.
func TestFailoverRules(t *testing.T) {
	t.Parallel()
	t.Run("bad credentials", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fakes["xai"].set(status(401, ""))
		d, err := b.run(t, map[string]any{"task": "t", "failover": []string{"anthropic"}})
		require.Nil(t, err)
		require.Equal(t, "anthropic", d.Provider)
		require.Equal(t, "auth", d.Failover[0].Kind)
	})
	t.Run("missing credentials", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *codeexec.Config) { c.Providers["xai"].APIKey = "" })
		d, err := b.run(t, map[string]any{"task": "t", "provider": "xai", "failover": []string{"openai"}})
		require.Nil(t, err)
		require.Equal(t, "openai", d.Provider)
		require.Equal(t, "missing_credentials", d.Failover[0].Kind)
	})
	t.Run("refused request", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fakes["xai"].set(status(400, ""))
		_, err := b.run(t, map[string]any{"task": "t", "failover": []string{"gemini"}})
		require.NotNil(t, err)
		require.Equal(t, contracts.CodeProviderError, err.Code)
		require.Zero(t, b.fakes["gemini"].hits.Load())
	})
	t.Run("later provider refuses", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fakes["xai"].set(status(500, ""))
		b.fakes["gemini"].set(status(400, ""))
		_, err := b.run(t, map[string]any{"task": "t", "failover": []string{"gemini", "openai"}})
		require.NotNil(t, err)
		require.Equal(t, contracts.CodeProviderError, err.Code)
		f := failureOf(t, err)
		require.Equal(t, "gemini", f.Provider)
		require.Len(t, f.Failover, 1)
		require.Equal(t, "xai", f.Failover[0].Provider)
		require.Zero(t, b.fakes["openai"].hits.Load())
	})
	t.Run("model applies to the first provider only", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fakes["xai"].set(status(500, ""))
		d, err := b.run(t, map[string]any{"task": "t", "model": "grok-4.3", "failover": []string{"gemini", "gemini", "xai"}})
		require.Nil(t, err)
		require.Equal(t, "gemini", d.Provider)
		require.Equal(t, "gemini-2.5-flash", d.Model)
		require.Len(t, d.Failover, 1, "repeats are dropped")
	})
}

// A provider that hangs gets only its share of the deadline, so the job can
// still fail over.
func TestHangingProviderLeavesTimeToFailOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fakes["xai"].set(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	d, err := b.runCtx(ctx, t, map[string]any{"task": "t", "timeoutSeconds": 30, "failover": []string{"gemini"}})
	require.Nil(t, err)
	require.Equal(t, "gemini", d.Provider)
	require.Equal(t, "transport", d.Failover[0].Kind)
	require.Contains(t, d.Failover[0].Message, "share of the job's deadline")
}

// While half-open, exactly one probe goes through; other jobs fail fast
// until it settles.
func TestHalfOpenLetsOneProbeThrough(t *testing.T) {
	t.Parallel()
	waiting := make(chan struct{}, 16)
	b := setup(t, breakerConfig(time.Nanosecond), func(c *codeexec.Config) {
		c.Logger = slog.New(&signalHandler{msg: "code_execution waiting for its breaker", ch: waiting})
	})
	b.fakes["xai"].set(status(500, ""))
	for i := 0; i < 5; i++ {
		_, err := b.run(t, map[string]any{"task": "t"})
		require.NotNil(t, err)
	}
	arrived, release := make(chan struct{}), make(chan struct{})
	b.fakes["xai"].set(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-arrived:
		default:
			close(arrived)
			<-release
		}
		ok("xai", "Mean: 42. Verified.")(w, r)
	})
	type result struct {
		d   *codeexec.Details
		err *contracts.Error
	}
	results := make(chan result, 2)
	runJob := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := b.tool.Handle(ctx, job(t, map[string]any{"task": "t"}))
		if err != nil {
			results <- result{err: contracts.AsError(err)}
			return
		}
		var d codeexec.Details
		_ = json.Unmarshal(out, &d)
		results <- result{d: &d}
	}
	go runJob()
	<-arrived
	require.False(t, b.tool.Available("xai"), "the probe is taken: the gate stops pulling")
	// A second job is refused while the probe runs: it waits, spending no
	// attempt, and goes once the probe has closed the breaker.
	go runJob()
	<-waiting
	close(release)
	for range 2 {
		r := <-results
		require.Nil(t, r.err)
		require.Equal(t, "xai", r.d.Provider)
		require.Equal(t, 1, r.d.Attempts)
	}
	require.Equal(t, int32(7), b.fakes["xai"].hits.Load())
	require.True(t, b.tool.Available("xai"))
}

// signalHandler signals every log record with message msg.
type signalHandler struct {
	msg string
	ch  chan struct{}
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *signalHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h *signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *signalHandler) WithGroup(string) slog.Handler      { return h }

// Many concurrent jobs share breakers and clients safely.
func TestConcurrentJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			p := []string{"xai", "openai", "gemini", "anthropic"}[i%4]
			in, _ := json.Marshal(map[string]any{"task": "t", "provider": p, "model": []string{"", "m-1", "m-2"}[i%3]})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := b.tool.Handle(ctx, &contracts.Job{ID: "j", Tool: "code_execution", Session: "s", Input: in})
			errs <- err
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var total int32
	for _, f := range b.fakes {
		total += f.hits.Load()
	}
	require.Equal(t, int32(40), total)
}
