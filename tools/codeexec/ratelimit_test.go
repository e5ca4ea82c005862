package codeexec_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/tools/codeexec"
	"github.com/toolq/toolq/worker"
)

// arrivals records when the provider's server saw each request.
type arrivals struct {
	mu sync.Mutex
	at []time.Time
}

func (a *arrivals) handler(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.at = append(a.at, time.Now())
		a.mu.Unlock()
		next(w, r)
	}
}

func (a *arrivals) sorted() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := slices.Clone(a.at)
	slices.SortFunc(out, func(x, y time.Time) int { return x.Compare(y) })
	return out
}

// maxIn is the most requests seen within any window of length d.
func maxIn(at []time.Time, d time.Duration) int {
	most := 0
	for i := range at {
		n := 0
		for j := i; j < len(at) && at[j].Sub(at[i]) < d; j++ {
			n++
		}
		most = max(most, n)
	}
	return most
}

// rateBus starts n workers on one real JetStream server, each with
// code_execution's xai provider pointed at one local server speaking xAI's
// wire format, with the same API key and pc's rate limit; before, when
// set, runs on the server before the workers start (say, to put an
// operator's limit in the limits bucket).
func rateBus(t *testing.T, n int, pc codeexec.ProviderConfig, before func(js jetstream.JetStream), answer http.HandlerFunc) (*producer.Producer, *arrivals) {
	t.Helper()
	srv := testutil.StartJetStream(t)
	if before != nil {
		before(testutil.JetStream(t, srv.Connect(t)))
	}
	rec := &arrivals{}
	fake := newFake(t, codeexec.XAI)
	if answer == nil {
		answer = ok(codeexec.XAI, "Mean: 42. Verified.")
	}
	fake.set(rec.handler(answer))
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	pc.APIKey, pc.BaseURL = keys[codeexec.XAI], fake.srv.URL
	for range n {
		w, err := worker.New(srv.Connect(t), &worker.Config{Logger: quiet, Tool: worker.ToolConfig{Concurrency: 4}})
		require.NoError(t, err)
		_, err = codeexec.Register(w, &codeexec.Config{
			Providers:  map[string]*codeexec.ProviderConfig{codeexec.XAI: &pc},
			Getenv:     func(string) string { return "" },
			Logger:     quiet,
			HTTPClient: &http.Client{Transport: tr},
		})
		require.NoError(t, err)
		require.NoError(t, w.Start(testutil.Context(t, 10*time.Second)))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, w.Stop(ctx))
		})
	}
	prod, err := producer.New(srv.Connect(t), &producer.Config{Session: "s1", Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(prod.Close)
	return prod, rec
}

// awaitAll requires every job to complete at its first attempt: waiting
// for the key's budget is no attempt.
func awaitAll(t *testing.T, prod *producer.Producer, jobs []*contracts.Job) {
	t.Helper()
	for _, j := range jobs {
		ev, err := prod.Await(testutil.Context(t, 60*time.Second), j.Session, j.ID, nil)
		require.NoError(t, err)
		require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "job %s: %+v", j.ID, ev.Data.Error)
		require.Equal(t, 1, ev.Data.Attempt, "job %s: waiting for the provider key spent an attempt", j.ID)
	}
}

// TestProviderKeyRateAcrossWorkers: three workers share one xai key
// limited to 10/s in the providers' configuration. The provider's server
// sees at most the budget, the jobs over it wait (one throttled event
// each, naming the provider and never the key) and all complete at their
// first attempt. Without the limit the 30 requests arrive at once (12
// slots) and both bounds fail.
func TestProviderKeyRateAcrossWorkers(t *testing.T) {
	t.Parallel()
	prod, rec := rateBus(t, 3, codeexec.ProviderConfig{RateLimit: "10/s"}, nil, nil)
	jobs := submitTasks(t, prod, 30, nil)
	awaitAll(t, prod, jobs)
	at := rec.sorted()
	require.Len(t, at, 30, "one request a job")
	// GCRA at 10/s with burst 1: the 30 starts are 29 intervals of 100 ms
	// apart at least (less a little for clocks and round trips), and no
	// second holds more than 10 of them (one more for the jitter between
	// a start and its request's arrival).
	span := at[len(at)-1].Sub(at[0])
	require.GreaterOrEqual(t, span, 2700*time.Millisecond, "30 requests in %s: faster than 10/s", span)
	require.LessOrEqual(t, maxIn(at, time.Second), 11, "requests in one second")

	throttled := 0
	require.NoError(t, prod.ReadEvents(testutil.Context(t, 10*time.Second), "s1", nil, func(ev *contracts.Event) error {
		if ev.Data.Status == contracts.StatusThrottled {
			throttled++
			var d contracts.ThrottledDetails
			require.NoError(t, json.Unmarshal(ev.Data.Result, &d))
			require.Equal(t, contracts.ThrottledDetails{WaitingFor: "rate", Provider: codeexec.XAI, Rate: "10/s burst 1"}, d)
			require.NotContains(t, string(ev.Data.Result), codeexec.KeyID(codeexec.XAI, keys[codeexec.XAI]))
		}
		return nil
	}))
	require.Greater(t, throttled, 10, "jobs over the budget said what they wait for")
}

// TestProviderKeyRateOverriddenByOperator: the operator's limit for every
// key of the provider (limit.p.xai, as `toolq limits set --provider xai`
// writes it) replaces the configuration's 1000/s. Ignored, the 8 jobs
// would go at once.
func TestProviderKeyRateOverriddenByOperator(t *testing.T) {
	t.Parallel()
	prod, rec := rateBus(t, 2, codeexec.ProviderConfig{RateLimit: "1000/s", Burst: 5}, func(js jetstream.JetStream) {
		ctx := testutil.Context(t, 10*time.Second)
		kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: contracts.Subjects{}.LimitsBucket(), History: 1, MaxValueSize: 1024, MaxBytes: 16 << 20})
		require.NoError(t, err)
		lim := contracts.RateLimit{Provider: codeexec.XAI, Rate: 4, Per: time.Second, Burst: 1}
		data, err := json.Marshal(lim)
		require.NoError(t, err)
		_, err = kv.Put(ctx, lim.LimitKey(), data)
		require.NoError(t, err)
	}, nil)
	jobs := submitTasks(t, prod, 8, nil)
	awaitAll(t, prod, jobs)
	at := rec.sorted()
	require.Len(t, at, 8)
	span := at[len(at)-1].Sub(at[0])
	require.GreaterOrEqual(t, span, 1650*time.Millisecond, "8 requests in %s: faster than the operator's 4/s", span)
}

// TestProviderKeyRateCountsRetries: a retry after a 429 is a request of
// the key's budget too; the tool waits for it within the job's deadline.
// At 1/s the retry's start is taken 1 s after the first request's (which
// the worker took before the job ran, some time before the request left);
// the backoff alone (250 ms ± half) would send it 375 ms after at most.
func TestProviderKeyRateCountsRetries(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	n := 0
	prod, rec := rateBus(t, 1, codeexec.ProviderConfig{RateLimit: "1/s"}, nil, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if first {
			status(http.StatusTooManyRequests, "")(w, r)
			return
		}
		ok(codeexec.XAI, "Mean: 42. Verified.")(w, r)
	})
	awaitAll(t, prod, submitTasks(t, prod, 1, nil))
	at := rec.sorted()
	require.Len(t, at, 2, "the 429 and its retry")
	require.GreaterOrEqual(t, at[1].Sub(at[0]), 650*time.Millisecond, "the retry came before the key's budget allowed it")
}

// TestProviderRateLimitConfig: a malformed rate limit in the providers'
// configuration is refused when the tool is built, naming the provider.
func TestProviderRateLimitConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pc   codeexec.ProviderConfig
		want string
	}{
		{codeexec.ProviderConfig{RateLimit: "sixty a minute"}, "xai rateLimit"},
		{codeexec.ProviderConfig{RateLimit: "60/fortnight"}, "unknown period"},
		{codeexec.ProviderConfig{RateLimit: "0/min"}, "xai rateLimit"},
		{codeexec.ProviderConfig{RateLimit: "60/min", Burst: -1}, "burst"},
		{codeexec.ProviderConfig{RateLimit: "60/ms"}, "period"},
		{codeexec.ProviderConfig{RateLimit: "5000000/s"}, "out of range"},
		{codeexec.ProviderConfig{Burst: 10}, "without a rateLimit"},
	} {
		pc := tc.pc
		pc.APIKey = keys[codeexec.XAI]
		_, err := codeexec.NewCodeExecution(&codeexec.Config{Providers: map[string]*codeexec.ProviderConfig{codeexec.XAI: &pc}, Logger: quiet})
		require.ErrorContains(t, err, tc.want, "%+v", tc.pc)
		require.ErrorContains(t, err, "xai", "%+v", tc.pc)
	}
	// Well-formed, with and without a key; the file's JSON form too.
	var cfg codeexec.Config
	require.NoError(t, json.Unmarshal([]byte(`{"providers":{"xai":{"apiKey":"k","rateLimit":"60/min","burst":10},"openai":{"rateLimit":"5/30s"}}}`), &cfg))
	cfg.Logger = quiet
	_, err := codeexec.NewCodeExecution(&cfg)
	require.NoError(t, err)
}

// TestKeyIDNamesTheKeyWithoutIt: a key's id is stable, differs between
// keys and providers, and contains nothing of the key.
func TestKeyIDNamesTheKeyWithoutIt(t *testing.T) {
	t.Parallel()
	id := codeexec.KeyID(codeexec.XAI, keys[codeexec.XAI])
	require.True(t, contracts.ValidKeyID(id), id)
	require.Equal(t, id, codeexec.KeyID(codeexec.XAI, keys[codeexec.XAI]))
	require.NotEqual(t, id, codeexec.KeyID(codeexec.XAI, keys[codeexec.XAI]+"x"))
	require.NotEqual(t, id, codeexec.KeyID(codeexec.OpenAI, keys[codeexec.XAI]))
	require.NotContains(t, keys[codeexec.XAI], id)
}
