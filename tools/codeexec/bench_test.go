package codeexec_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/codeexec"
)

func p50(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// BenchmarkProviderPath measures the overhead of the provider path (job
// input → HTTP request → parsed, encoded result) over the bare HTTP round
// trip, against a local server that answers at once. Each iteration makes
// one bare round trip and one Handle call, interleaved, and the p50 of
// both and of their difference are reported.
func BenchmarkProviderPath(b *testing.B) {
	body := okBody(codeexec.XAI, "Mean: 42. Verified.")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	tool, err := codeexec.NewCodeExecution(&codeexec.Config{
		Providers:  map[string]*codeexec.ProviderConfig{"xai": {APIKey: "xai-bench-key", BaseURL: srv.URL}}, //nolint:gosec // G101: a fake key for a test server
		HTTPClient: hc,
		Getenv:     func(string) string { return "" },
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	job := &contracts.Job{ID: "bench", Tool: codeexec.ToolName, Session: "s", Input: json.RawMessage(`{"task":"Mean of 40, 42 and 44?"}`)}
	reqBody := []byte(`{"model":"grok-4.6","input":[{"role":"user","content":"Mean of 40, 42 and 44?"}],"tools":[{"type":"code_interpreter"}],"store":false}`)
	bare := func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/responses", bytes.NewReader(reqBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer xai-bench-key")
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
	}
	ctx := context.Background()
	bare()
	if _, err := tool.Handle(ctx, job); err != nil {
		b.Fatal(err)
	}
	bareD := make([]time.Duration, 0, b.N)
	toolD := make([]time.Duration, 0, b.N)
	diff := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		bare()
		t1 := time.Now()
		if _, err := tool.Handle(ctx, job); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		bareD = append(bareD, t1.Sub(t0))
		toolD = append(toolD, t2.Sub(t1))
		diff = append(diff, t2.Sub(t1)-t1.Sub(t0))
	}
	b.StopTimer()
	pb, pt := p50(bareD), p50(toolD)
	b.ReportMetric(us(pb), "p50-bare-µs")
	b.ReportMetric(us(pt), "p50-handle-µs")
	b.ReportMetric(us(p50(diff)), "p50-overhead-µs")
	b.ReportMetric(float64(pt)/float64(pb), "p50-ratio")
}

// BenchmarkOpenBreaker measures what a job costs while its provider's
// breaker is open: one fast failure, no request.
func BenchmarkOpenBreaker(b *testing.B) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	tool, err := codeexec.NewCodeExecution(&codeexec.Config{
		Providers:  map[string]*codeexec.ProviderConfig{"xai": {APIKey: "xai-bench-key", BaseURL: srv.URL}}, //nolint:gosec // G101: a fake key for a test server
		HTTPClient: &http.Client{Transport: tr},
		Getenv:     func(string) string { return "" },
		Logger:     slog.New(slog.DiscardHandler),
		Retry:      codeexec.RetryConfig{MaxAttempts: 1},
		Breaker:    codeexec.BreakerConfig{Failures: 1, OpenTimeout: time.Hour},
	})
	if err != nil {
		b.Fatal(err)
	}
	job := &contracts.Job{ID: "bench", Tool: codeexec.ToolName, Session: "s", Input: json.RawMessage(`{"task":"t"}`)}
	ctx := context.Background()
	_, _ = tool.Handle(ctx, job) // opens the breaker
	if tool.Available(codeexec.XAI) {
		b.Fatal("breaker did not open")
	}
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		_, err := tool.Handle(ctx, job)
		d = append(d, time.Since(t0))
		if !contracts.AsError(err).Retryable {
			b.Fatal("want a retryable provider_unavailable")
		}
	}
	b.StopTimer()
	if n := hits.Load(); n != 1 {
		b.Fatalf("%d requests reached the server, want 1", n)
	}
	b.ReportMetric(us(p50(d)), "p50-fast-fail-µs")
}
