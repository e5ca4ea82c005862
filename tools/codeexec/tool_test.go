package codeexec_test

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/codeexec"
)

func TestHandleXAIResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, err := b.run(t, map[string]any{"task": "mean of 40, 42, 44"})
	require.Nil(t, err)
	require.Equal(t, "mean of 40, 42, 44", d.Task)
	require.Equal(t, "xai", d.Provider)
	require.Equal(t, "grok-4.6", d.Model)
	require.GreaterOrEqual(t, d.TookMs, int64(0))
	require.Equal(t, "Mean: 42. Verified.", d.Content)
	require.Equal(t, []string{"https://example.com/input.csv", "https://example.com/result.csv"}, d.Citations)
	require.True(t, d.UsedCodeExecution)
	require.Equal(t, []string{"code_interpreter_call", "message"}, d.OutputTypes)
	require.Equal(t, []codeexec.Run{{Code: "print(42)", Language: "python", Outcome: "ok", Output: "42\n"}}, d.Runs)
	require.Equal(t, 1, d.Attempts)
	require.Empty(t, d.Failover)
	require.Equal(t, int64(100), d.Usage.InputTokens)
	require.Equal(t, int64(20), d.Usage.OutputTokens)
	require.Equal(t, int64(1), d.Usage.ToolCalls)
	// xAI publishes $5 per 1,000 calls; token prices are not configured.
	require.NotNil(t, d.Usage.CostUSD)
	require.InDelta(t, 0.005, *d.Usage.CostUSD, 1e-12)
	require.Equal(t, "estimate", d.Usage.CostSource)

	body := b.fakes["xai"].lastBody(t)
	require.Equal(t, "grok-4.6", body["model"])
	require.Equal(t, false, body["store"])
	require.Equal(t, map[string]any{"effort": "low"}, body["reasoning"])
	require.NotContains(t, body, "max_turns")
	require.Equal(t, "Bearer "+keys["xai"], b.fakes["xai"].lastHeader(t).Get("Authorization"))
}

func TestHandleEachProvider(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"xai", "openai", "gemini", "anthropic"} {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			d, err := b.run(t, map[string]any{"task": "t", "provider": p})
			require.Nil(t, err)
			require.Equal(t, p, d.Provider)
			require.Equal(t, "Mean: 42. Verified.", d.Content)
			require.Len(t, d.Runs, 1)
			require.Equal(t, "ok", d.Runs[0].Outcome)
			require.Equal(t, "42\n", d.Runs[0].Output)
			require.Equal(t, int32(1), b.fakes[p].hits.Load())
			for q, f := range b.fakes {
				if q != p {
					require.Zero(t, f.hits.Load(), "no request to %s", q)
				}
			}
		})
	}
}

// Seed 000: max_turns only when configured as a positive integer; a custom
// model gets neither reasoning nor max_turns; a job may override both.
func TestMaxTurnsAndModel(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *codeexec.Config) { c.Providers["xai"].MaxTurns = 2 })
	_, err := b.run(t, map[string]any{"task": "t"})
	require.Nil(t, err)
	require.InDelta(t, 2, b.fakes["xai"].lastBody(t)["max_turns"], 0)

	b = setup(t, func(c *codeexec.Config) { c.Providers["xai"].MaxTurns = -1 })
	_, err = b.run(t, map[string]any{"task": "t"})
	require.Nil(t, err)
	require.NotContains(t, b.fakes["xai"].lastBody(t), "max_turns")

	_, err = b.run(t, map[string]any{"task": "t", "model": "grok-build-0.1"})
	require.Nil(t, err)
	body := b.fakes["xai"].lastBody(t)
	require.Equal(t, "grok-build-0.1", body["model"])
	require.NotContains(t, body, "reasoning")
	require.NotContains(t, body, "max_turns")

	_, err = b.run(t, map[string]any{"task": "t", "model": "xai/grok-4.3-latest", "maxTurns": 3})
	require.Nil(t, err)
	body = b.fakes["xai"].lastBody(t)
	require.Equal(t, "grok-4.3", body["model"])
	require.InDelta(t, 3, body["max_turns"], 0)
	require.Equal(t, map[string]any{"effort": "low"}, body["reasoning"])
}

func TestConfigFallbacks(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *codeexec.Config) {
		c.Providers["xai"].Model = "  "
		c.Providers["xai"].TimeoutSeconds = math.NaN()
		c.Providers["gemini"].Model = "bad model id!"
		c.Providers["openai"].TimeoutSeconds = math.Inf(1)
	})
	d, err := b.run(t, map[string]any{"task": "t"})
	require.Nil(t, err)
	require.Equal(t, "grok-4.6", b.fakes["xai"].lastBody(t)["model"])
	require.Equal(t, "grok-4.6", d.Model)
	_, err = b.run(t, map[string]any{"task": "t", "provider": "gemini"})
	require.Nil(t, err)
	require.Contains(t, b.logs.String(), "invalid model in config")
	require.Contains(t, b.logs.String(), "invalid timeoutSeconds in config")
}

func TestMissingCredentials(t *testing.T) {
	t.Parallel()
	envs := map[string][]string{
		"xai":       {"XAI_API_KEY"},
		"openai":    {"OPENAI_API_KEY"},
		"gemini":    {"GEMINI_API_KEY", "GOOGLE_API_KEY"},
		"anthropic": {"ANTHROPIC_API_KEY"},
	}
	for p, vars := range envs {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(c *codeexec.Config) { c.Providers[p].APIKey = "" })
			require.False(t, b.tool.Available(p))
			require.NotContains(t, b.tool.Providers(), p)
			_, err := b.run(t, map[string]any{"task": "t", "provider": p})
			require.NotNil(t, err)
			require.Equal(t, contracts.CodeMissingCredentials, err.Code)
			require.False(t, err.Retryable)
			require.ErrorIs(t, err, contracts.ErrMissingCredentials)
			var payload codeexec.MissingCredentials
			require.NoError(t, json.Unmarshal(err.Details, &payload))
			require.Equal(t, "missing_"+p+"_api_key", payload.Error)
			require.Equal(t, "docs/tools/code-execution", payload.Docs)
			for _, v := range vars {
				require.Contains(t, payload.Message, "`"+v+"`")
			}
			require.Contains(t, payload.Message, "`providers."+p+".apiKey`")
			require.Zero(t, b.fakes[p].hits.Load(), "no request without credentials")
		})
	}
}

func TestMissingCredentialsPayloadShape(t *testing.T) {
	t.Parallel()
	// No provider has a key: the default stays xai (the code_execution contract).
	b := setup(t, func(c *codeexec.Config) {
		for _, pc := range c.Providers {
			pc.APIKey = ""
		}
	})
	require.Equal(t, "xai", b.tool.DefaultProvider())
	require.True(t, b.tool.Accepting(), "with nothing enabled jobs are taken and answered with the missing-credentials payload")
	_, err := b.run(t, map[string]any{"task": "t"})
	require.NotNil(t, err)
	require.JSONEq(t, `{
		"error": "missing_xai_api_key",
		"message": "code_execution needs xAI credentials. Set `+"`XAI_API_KEY`"+` in the worker environment, or configure `+"`providers.xai.apiKey`"+` in the worker config.",
		"docs": "docs/tools/code-execution"
	}`, string(err.Details))
}

func TestCredentialSources(t *testing.T) {
	t.Parallel()
	t.Run("config beats environment", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *codeexec.Config) { c.Providers["xai"].APIKey = "xai-plugin-key" })
		b.env["XAI_API_KEY"] = "xai-env-key"
		_, err := b.run(t, map[string]any{"task": "t"})
		require.Nil(t, err)
		require.Equal(t, "Bearer xai-plugin-key", b.fakes["xai"].lastHeader(t).Get("Authorization"))
	})
	env := map[string][2]string{
		"xai":       {"XAI_API_KEY", "Authorization"},
		"openai":    {"OPENAI_API_KEY", "Authorization"},
		"gemini":    {"GOOGLE_API_KEY", "X-Goog-Api-Key"},
		"anthropic": {"ANTHROPIC_API_KEY", "X-Api-Key"},
	}
	for p, v := range env {
		t.Run("environment "+p, func(t *testing.T) {
			t.Parallel()
			var b *bundle
			envs := map[string]string{v[0]: "env-key-" + p}
			b = setup(t, func(c *codeexec.Config) {
				c.Providers[p].APIKey = ""
				c.Getenv = func(k string) string { return envs[k] }
			})
			require.True(t, b.tool.Available(p))
			_, err := b.run(t, map[string]any{"task": "t", "provider": p})
			require.Nil(t, err)
			require.Equal(t, "env-key-"+p, strings.TrimPrefix(b.fakes[p].lastHeader(t).Get(v[1]), "Bearer "))
		})
	}
	t.Run("GEMINI_API_KEY before GOOGLE_API_KEY", func(t *testing.T) {
		t.Parallel()
		envs := map[string]string{"GEMINI_API_KEY": "gemini-key", "GOOGLE_API_KEY": "google-key"}
		b := setup(t, func(c *codeexec.Config) {
			c.Providers["gemini"].APIKey = ""
			c.Getenv = func(k string) string { return envs[k] }
		})
		_, err := b.run(t, map[string]any{"task": "t", "provider": "gemini"})
		require.Nil(t, err)
		require.Equal(t, "gemini-key", b.fakes["gemini"].lastHeader(t).Get("x-goog-api-key"))
	})
}

func TestEnablement(t *testing.T) {
	t.Parallel()
	off := false
	b := setup(t, func(c *codeexec.Config) { c.Providers["openai"].Enabled = &off })
	require.Equal(t, []string{"xai", "gemini", "anthropic"}, b.tool.Providers())
	require.False(t, b.tool.Available("openai"))
	require.False(t, b.tool.Available("nope"))
	_, err := b.run(t, map[string]any{"task": "t", "provider": "openai"})
	require.NotNil(t, err)
	require.Equal(t, contracts.CodeProviderUnavailable, err.Code)
	require.False(t, err.Retryable)
	require.Zero(t, b.fakes["openai"].hits.Load())

	// xai without a key: the default moves to the first enabled provider.
	b = setup(t, func(c *codeexec.Config) { c.Providers["xai"].APIKey = "" })
	require.Equal(t, "openai", b.tool.DefaultProvider())
}

func TestConfigFailsClosed(t *testing.T) {
	t.Parallel()
	_, err := codeexec.NewCodeExecution(&codeexec.Config{Providers: map[string]*codeexec.ProviderConfig{"xai": {}, "grok": {}}})
	require.ErrorContains(t, err, "unknown provider config")
	_, err = codeexec.NewCodeExecution(&codeexec.Config{DefaultProvider: "grok"})
	require.ErrorContains(t, err, "unknown defaultProvider")
	for _, u := range []string{"ftp://x", "localhost:8080", "http://", "https://user:pw@x", "http://x/?key=1"} {
		_, err = codeexec.NewCodeExecution(&codeexec.Config{Providers: map[string]*codeexec.ProviderConfig{"xai": {BaseURL: u}}})
		require.ErrorContains(t, err, "baseUrl", u)
	}
	tool, err := codeexec.NewCodeExecution(nil)
	require.NoError(t, err)
	require.Equal(t, "code_execution", tool.Name())
}

func TestInvalidInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	bad := map[string]string{
		"not an object":     `"task"`,
		"empty":             ``,
		"no task":           `{}`,
		"blank task":        `{"task":"  "}`,
		"unknown field":     `{"task":"t","code":"print(1)"}`,
		"unknown provider":  `{"task":"t","provider":"grok"}`,
		"bad model":         `{"task":"t","model":"a b"}`,
		"maxTurns zero":     `{"task":"t","maxTurns":0}`,
		"maxTurns float":    `{"task":"t","maxTurns":1.5}`,
		"timeout negative":  `{"task":"t","timeoutSeconds":-1}`,
		"timeout huge":      `{"task":"t","timeoutSeconds":1e9}`,
		"bad failover":      `{"task":"t","failover":["xai","grok"]}`,
		"trailing":          `{"task":"t"} {}`,
		"task wrong type":   `{"task":7}`,
		"too many failover": `{"task":"t","failover":["xai","openai","gemini","anthropic","xai"]}`,
	}
	for name, in := range bad {
		_, err := b.tool.Handle(context.Background(), &contracts.Job{ID: "j", Tool: "code_execution", Session: "s", Input: json.RawMessage(in)})
		require.ErrorIs(t, err, contracts.ErrInvalidInput, name)
	}
	_, err := b.tool.Handle(context.Background(), job(t, map[string]any{"task": strings.Repeat("x", codeexec.MaxTaskBytes+1)}))
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
	_, err = b.tool.Handle(context.Background(), nil)
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
	for _, f := range b.fakes {
		require.Zero(t, f.hits.Load())
	}
}

func TestPermanentFailuresAreNotRetried(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		handler http.HandlerFunc
		code    contracts.ErrorCode
		kind    string
		message string
	}{
		{"400", status(400, ""), contracts.CodeProviderError, "bad_request", "status Bad Request"},
		{"401", status(401, ""), contracts.CodeProviderError, "auth", "rejected the credentials"},
		{"403", status(403, ""), contracts.CodeProviderError, "auth", "rejected the credentials"},
		{"malformed JSON", raw(`{"output": [`), contracts.CodeProviderError, "malformed", "malformed"},
		{"no answer text", raw(`{"output":[{"type":"message","content":[]}]}`), contracts.CodeProviderError, "no_answer", "no answer text returned; try a simpler request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.fakes["xai"].set(tc.handler)
			_, err := b.run(t, map[string]any{"task": "t"})
			require.NotNil(t, err)
			require.Equal(t, tc.code, err.Code)
			require.False(t, err.Retryable)
			require.Contains(t, err.Message, tc.message)
			f := failureOf(t, err)
			require.Equal(t, tc.kind, f.Kind)
			require.Equal(t, "xai", f.Provider)
			require.Equal(t, 1, f.Attempts)
			require.Equal(t, int32(1), b.fakes["xai"].hits.Load(), "not retried")
		})
	}
}

func TestRetryableFailuresAreRetried(t *testing.T) {
	t.Parallel()
	cases := map[string]http.HandlerFunc{
		"500":                status(500, ""),
		"503":                status(503, ""),
		"429":                status(429, ""),
		"dropped connection": drop,
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.fakes["xai"].set(sequence(h, h, ok("xai", "Mean: 42. Verified.")))
			d, err := b.run(t, map[string]any{"task": "t"})
			require.Nil(t, err)
			require.Equal(t, 3, d.Attempts)
			require.Equal(t, int32(3), b.fakes["xai"].hits.Load())
		})
	}
	t.Run("exhausted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *codeexec.Config) { c.Retry.MaxAttempts = 3 })
		b.fakes["xai"].set(status(503, ""))
		_, err := b.run(t, map[string]any{"task": "t"})
		require.NotNil(t, err)
		require.Equal(t, contracts.CodeProviderUnavailable, err.Code)
		require.True(t, err.Retryable)
		f := failureOf(t, err)
		require.Equal(t, "server", f.Kind)
		require.Equal(t, 503, f.Status)
		require.Equal(t, 3, f.Attempts)
		require.Equal(t, int32(3), b.fakes["xai"].hits.Load())
	})
}

func drop(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// An attempt that outlasts its timeout is cancelled and retried.
func TestAttemptTimeoutRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hang := func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	b.fakes["xai"].set(sequence(hang, ok("xai", "Mean: 42. Verified.")))
	d, err := b.run(t, map[string]any{"task": "t", "timeoutSeconds": 1})
	require.Nil(t, err)
	require.Equal(t, 2, d.Attempts)
}

// A 429 with Retry-After: 1 waits (at least) that long before the retry.
func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fakes["xai"].set(sequence(status(429, "1"), ok("xai", "Mean: 42. Verified.")))
	start := time.Now()
	d, err := b.run(t, map[string]any{"task": "t"})
	took := time.Since(start)
	require.Nil(t, err)
	require.Equal(t, 2, d.Attempts)
	require.GreaterOrEqual(t, took, time.Second)
	require.Less(t, took, 5*time.Second)
}

// A Retry-After past the job's deadline is not waited for: the job fails at
// once, retryable, saying how long to wait.
func TestRetryAfterBeyondDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fakes["xai"].set(status(429, "30"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := b.runCtx(ctx, t, map[string]any{"task": "t"})
	require.Less(t, time.Since(start), 2*time.Second)
	require.NotNil(t, err)
	require.Equal(t, contracts.CodeProviderUnavailable, err.Code)
	require.True(t, err.Retryable)
	f := failureOf(t, err)
	require.Equal(t, "rate_limited", f.Kind)
	require.Equal(t, int64(30000), f.RetryAfterMs)
	require.Equal(t, 30*time.Second, codeexec.RetryAfter(err))
	require.Equal(t, int32(1), b.fakes["xai"].hits.Load())
	require.Zero(t, codeexec.RetryAfter(nil))
	require.Zero(t, codeexec.RetryAfter(contracts.Errorf(contracts.CodeProviderError, "x")))
}

// The job's deadline bounds every retry.
func TestDeadlineBoundsRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *codeexec.Config) {
		c.Retry.MaxAttempts = 1_000_000
		c.Breaker.Failures = 1_000_000
		c.NewBackOff = nil
		c.Retry.InitialInterval = 20 * time.Millisecond
		c.Retry.MaxInterval = 40 * time.Millisecond
	})
	b.fakes["xai"].set(status(503, ""))
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.runCtx(ctx, t, map[string]any{"task": "t"})
	took := time.Since(start)
	require.NotNil(t, err)
	require.Contains(t, []contracts.ErrorCode{contracts.CodeTimeout, contracts.CodeProviderUnavailable}, err.Code)
	require.True(t, err.Retryable)
	require.Less(t, took, 2*time.Second)
	require.Greater(t, b.fakes["xai"].hits.Load(), int32(1))
}

// Without a context deadline, the job's timeout_ms applies.
func TestJobTimeoutWithoutDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fakes["xai"].set(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	j := job(t, map[string]any{"task": "t"})
	j.TimeoutMs = 200
	_, err := b.tool.Handle(context.Background(), j)
	require.ErrorIs(t, err, contracts.ErrTimeout)
}

func TestCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	arrived := make(chan struct{})
	b.fakes["xai"].set(func(_ http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	j := job(t, map[string]any{"task": "t", "failover": []string{"gemini"}})
	go func() {
		_, err := b.tool.Handle(ctx, j)
		errc <- err
	}()
	<-arrived
	cancel()
	err := <-errc
	require.ErrorIs(t, err, contracts.ErrCancelled)
	require.False(t, contracts.AsError(err).Retryable)
	require.Zero(t, b.fakes["gemini"].hits.Load(), "a cancelled job does not fail over")
}

func TestSecretsNeverLogged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.fakes["xai"].set(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(401)
		_, _ = w.Write([]byte(`{"error":"Incorrect API key provided: ` + keys["xai"] + `"}`))
	})
	_, err := b.run(t, map[string]any{"task": "t"})
	require.NotNil(t, err)
	logs := b.logs.String()
	require.Contains(t, logs, "provider response")
	require.NotContains(t, logs, keys["xai"])
	require.NotContains(t, err.Message, keys["xai"])
	require.NotContains(t, string(err.Details), keys["xai"])
}

func TestCostEstimates(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *codeexec.Config) {
		c.Providers["gemini"].Pricing = &codeexec.Pricing{InputPerMTokUSD: 0.30, OutputPerMTokUSD: 2.50}
	})
	d, err := b.run(t, map[string]any{"task": "t", "provider": "gemini"})
	require.Nil(t, err)
	require.NotNil(t, d.Usage.CostUSD)
	require.InDelta(t, 100*0.30/1e6+20*2.50/1e6, *d.Usage.CostUSD, 1e-9)
	require.Equal(t, "estimate", d.Usage.CostSource)

	d, err = b.run(t, map[string]any{"task": "t", "provider": "anthropic"})
	require.Nil(t, err)
	require.Nil(t, d.Usage.CostUSD, "no published per-call price, none configured")

	b.fakes["xai"].set(raw(`{"model":"grok-4.6","output":[{"type":"message","content":[{"type":"output_text","text":"4"}]}],"usage":{"input_tokens":2300,"output_tokens":24,"cost_in_usd_ticks":81834000}}`))
	d, err = b.run(t, map[string]any{"task": "t"})
	require.Nil(t, err)
	require.Equal(t, "provider", d.Usage.CostSource)
	require.InDelta(t, 0.0081834, *d.Usage.CostUSD, 1e-12)
}

func TestLargeResultsClipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := strings.Repeat("é", codeexec.MaxContentBytes)
	img := strings.Repeat("A", codeexec.MaxImageBytes+1)
	body, _ := json.Marshal(map[string]any{"candidates": []any{map[string]any{"content": map[string]any{"parts": []any{
		map[string]any{"executableCode": map[string]any{"language": "PYTHON", "code": "plot()"}},
		map[string]any{"codeExecutionResult": map[string]any{"outcome": "OUTCOME_OK", "output": strings.Repeat("x", codeexec.MaxRunOutputBytes*2)}},
		map[string]any{"inlineData": map[string]any{"mimeType": "image/png", "data": img}},
		map[string]any{"text": big},
	}}}}})
	b.fakes["gemini"].set(raw(string(body)))
	d, err := b.run(t, map[string]any{"task": "t", "provider": "gemini"})
	require.Nil(t, err)
	require.True(t, d.Truncated)
	require.LessOrEqual(t, len(d.Content), codeexec.MaxContentBytes+len("…"))
	require.True(t, json.Valid([]byte(`"`+d.Content+`"`)))
	require.LessOrEqual(t, len(d.Runs[0].Output), codeexec.MaxRunOutputBytes+len("…"))
	require.Equal(t, []codeexec.Image{{MIMEType: "image/png", Omitted: true}}, d.Runs[0].Images)
}

func FuzzDecodeInput(f *testing.F) {
	f.Add([]byte(`{"task":"t","provider":"xai","model":"grok-4.6","maxTurns":2,"timeoutSeconds":30,"failover":["gemini"]}`))
	f.Add([]byte(`{"task":""}`))
	f.Add([]byte(`{"task":"t","maxTurns":1e400}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := codeexec.DecodeInput(data)
		if err != nil {
			require.ErrorIs(t, err, contracts.ErrInvalidInput)
			return
		}
		require.NoError(t, in.Validate())
		require.NotEmpty(t, strings.TrimSpace(in.Task))
	})
}
