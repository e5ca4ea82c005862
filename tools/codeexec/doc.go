// Package codeexec implements the code_execution tool: a task (an analysis
// request with its data inline) runs in a model provider's server-side
// Python sandbox — xAI or OpenAI Responses code_interpreter, Gemini
// codeExecution, Anthropic's code execution tool — and comes back as one
// normalized result.
//
// # Wiring
//
// Register builds the tool and adds it to a worker as code_execution, with
// its catalog entry:
//
//	tool, err := codeexec.Register(w, &codeexec.Config{
//		OnBreakerChange: func(c codeexec.BreakerChange) { /* log, publish an event */ },
//	})
//
// The worker pulls code_execution jobs only while Accepting reports true
// (some enabled provider has a breaker, among the models its jobs use,
// that lets a call through); Available tells about one provider. Without a worker, NewCodeExecution builds the tool and Handle
// runs one job (its error is a *contracts.Error).
//
// # Input and result
//
// Input is {task, provider?, model?, maxTurns?, timeoutSeconds?, failover?}
// (see Input); unknown fields and providers are invalid_input. The result is
// Details: the code_execution contract's {task, provider, model, tookMs, content, citations,
// usedCodeExecution, outputTypes} plus runs (each executed code block with
// its outcome and output), usage (tokens, tool calls, cost), attempts and
// the failover trail. provider names the provider that answered.
//
// # Failures
//
// Handle never panics on provider input; failures are *contracts.Error:
//
//   - missing_credentials, not retryable: the provider has no API key.
//     Details is the code_execution contract's payload {error: "missing_xai_api_key", message,
//     docs}.
//   - provider_error, not retryable: 401/403 (bad credentials), other 4xx,
//     a malformed response body, or an answer without text ("no answer text
//     returned; try a simpler request").
//   - provider_unavailable, retryable: 429, 5xx, timeouts and dropped
//     connections that outlasted the retries, or an open breaker (whose
//     message and status name the fault that last counted, e.g. HTTP 503).
//     Details carries retryAfterMs when the provider (Retry-After) or the
//     breaker says how long to wait.
//   - timeout (retryable) or cancelled: the job's context ended.
//
// Every other failure's Details is {provider, model, kind, status,
// retryAfterMs, attempts, failover}.
//
// # Retries, breakers and failover
//
// Within one provider, retryable failures are retried with exponential
// backoff (backoff/v4), waiting at least the server's Retry-After, for at
// most Config.Retry.MaxAttempts attempts and never past the job's deadline:
// a wait that would outlast it ends the job at once with a retryable error.
// Each attempt is bounded by the provider's timeoutSeconds (30 by default).
// While a job may still fail over, each provider gets an even share of the
// remaining deadline, so a provider that hangs leaves time for the next.
//
// Each provider+model has a gobreaker/v2 breaker. Only provider faults count
// (5xx, transport failures, malformed bodies); 4xx, 429, answers without text
// and cancellations neither trip nor heal it. After
// Config.Breaker.Failures consecutive faults (5) it opens; calls are refused
// until OpenTimeout passes, then one half-open probe decides. A refused call
// is not an attempt. A job whose provider is unavailable — open breaker,
// exhausted retries, bad or missing credentials — moves on to the next
// provider of its failover list; on its last provider it waits for the
// breaker (until the probe, or the probe's end) when that fits its
// deadline, and fails fast, retryable, only when it does not.
//
// # Configuration
//
// A provider is enabled when its API key resolves (Config, then
// XAI_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY/GOOGLE_API_KEY,
// ANTHROPIC_API_KEY) and it is not disabled with enabled: false. Unknown
// provider names in the configuration fail NewCodeExecution. Base URLs are
// configurable, so tests run the real clients against local servers.
// Request and response bodies are logged at debug level with keys redacted.
//
// # Rate limits per API key
//
// A provider's rateLimit and burst cap the requests made with its API key
// across every worker that has the key, counted on the key's id (KeyID, a
// hash, never the key) in the worker's limits bucket; a malformed one fails
// NewCodeExecution. On a worker (Register) the job's first request takes
// its start before the job runs (ToolConfig.RateLimits: the job waits
// without a slot and spends no attempt); retries and failovers take theirs
// in Handle, within the job's deadline. The operator's `toolq limits set
// --provider` replaces the configured rate.
//
// The wire clients live in the subpackages xai, openai, gemini and
// anthropic; their shared types in provider.
package codeexec
