package codeexec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/codeexec/anthropic"
	"github.com/toolq/toolq/tools/codeexec/gemini"
	"github.com/toolq/toolq/tools/codeexec/openai"
	"github.com/toolq/toolq/tools/codeexec/provider"
	"github.com/toolq/toolq/tools/codeexec/xai"
)

// Provider names, as used in job input and in Config.Providers.
const (
	XAI       = provider.XAI
	OpenAI    = provider.OpenAI
	Gemini    = provider.Gemini
	Anthropic = provider.Anthropic
)

// Defaults.
const (
	// DefaultTimeoutSeconds bounds one HTTP attempt (the code_execution contract).
	DefaultTimeoutSeconds = 30
	// DefaultJobTimeout bounds a Handle call whose context has no deadline.
	DefaultJobTimeout = 2 * time.Minute
	// DefaultBreakerFailures is how many consecutive provider faults open a
	// breaker.
	DefaultBreakerFailures = 5
	// DefaultBreakerOpenTimeout is how long a breaker stays open before a
	// half-open probe.
	DefaultBreakerOpenTimeout = 30 * time.Second
	// DefaultMaxAttempts is how many HTTP attempts one provider gets per job.
	DefaultMaxAttempts = 4
)

// Config configures the code_execution tool. The zero value is usable:
// every provider whose API key resolves (config, then environment) is
// enabled with its defaults.
type Config struct {
	// Providers configures providers by name (xai, openai, gemini,
	// anthropic). Any other name fails NewCodeExecution: unknown provider
	// config fails closed.
	Providers map[string]*ProviderConfig `json:"providers,omitempty"`
	// DefaultProvider answers jobs that name none; "xai" when empty (the
	// 000), or the first enabled provider when xai is not.
	DefaultProvider string `json:"defaultProvider,omitempty"`
	// Retry tunes the retries within one provider.
	Retry RetryConfig `json:"retry,omitempty"`
	// Breaker tunes the per provider+model circuit breakers.
	Breaker BreakerConfig `json:"breaker,omitempty"`
	// Tenants, when set, keeps code_execution to these tenants ("" is the
	// default tenant) on a worker that serves named tenants: it pulls the
	// tool's jobs only from their streams and only their code-mode runs
	// see it (worker.ToolConfig.Tenants). Tenants with provider keys of
	// their own run workers of their own, each config naming its tenants.
	// Absent: every tenant the worker serves.
	Tenants []string `json:"tenants,omitempty"`
	// DefaultJobTimeout bounds a Handle call whose context has no deadline;
	// DefaultJobTimeout when 0.
	DefaultJobTimeout time.Duration `json:"-"`

	// OnBreakerChange is called on every breaker state change. It runs
	// synchronously under the breaker's lock: it must not block and must
	// not call back into the tool (Available, Handle).
	OnBreakerChange func(BreakerChange) `json:"-"`
	// HTTPClient sends every provider request; a client with sane
	// transport timeouts when nil.
	HTTPClient *http.Client `json:"-"`
	// Getenv reads environment variables; os.Getenv when nil.
	Getenv func(string) string `json:"-"`
	// Logger receives breaker changes, failovers and (at debug level)
	// provider bodies with secrets redacted; slog.Default() when nil.
	Logger *slog.Logger `json:"-"`
	// Now is the clock; time.Now when nil.
	Now func() time.Time `json:"-"`
	// NewBackOff makes the backoff of one provider's retries within a job;
	// exponential from Retry when nil. Tests inject a zero backoff.
	NewBackOff func() backoff.BackOff `json:"-"`
}

// ProviderConfig configures one provider. Invalid values fall back to the
// defaults, as the code_execution contract describes (with a warning logged).
type ProviderConfig struct {
	// Enabled false disables the provider; nil or true enables it when its
	// API key resolves.
	Enabled *bool `json:"enabled,omitempty"`
	// APIKey is the key; the provider's environment variable when empty
	// (XAI_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY then GOOGLE_API_KEY,
	// ANTHROPIC_API_KEY).
	APIKey string `json:"apiKey,omitempty"`
	// BaseURL is the API root (an http or https URL, path prefix allowed);
	// the provider's public endpoint when empty.
	BaseURL string `json:"baseUrl,omitempty"`
	// Model is the default model; blank falls back to the provider default.
	Model string `json:"model,omitempty"`
	// TimeoutSeconds bounds one HTTP attempt; a non-finite or non-positive
	// value falls back to 30.
	TimeoutSeconds float64 `json:"timeoutSeconds,omitempty"`
	// MaxTurns caps the provider's internal tool turns; only a positive
	// integer is used.
	MaxTurns int `json:"maxTurns,omitempty"`
	// Pricing overrides the published prices used for cost estimates.
	Pricing *Pricing `json:"pricing,omitempty"`
	// RateLimit caps the requests made with this provider's API key across
	// every worker that has the same key, "60/min" (<count>/<s|min|h|
	// duration>); none when empty. The operator's `toolq limits set
	// --provider` replaces it. Unlike the fields above, a malformed value
	// fails NewCodeExecution: a limit that silently fell back to none would
	// spend the key's quota.
	RateLimit string `json:"rateLimit,omitempty"`
	// Burst is how many requests may go at once after a quiet spell; 1
	// when 0. Only with RateLimit.
	Burst int `json:"burst,omitempty"`
}

// Pricing is what a provider charges, for cost estimates. Zero fields are
// unknown and contribute nothing.
type Pricing struct {
	InputPerMTokUSD  float64 `json:"inputPerMTokUsd,omitempty"`
	OutputPerMTokUSD float64 `json:"outputPerMTokUsd,omitempty"`
	PerToolCallUSD   float64 `json:"perToolCallUsd,omitempty"`
}

// RetryConfig tunes retries of retryable failures (429, 5xx, timeouts,
// dropped connections) within one provider, inside the job's deadline.
type RetryConfig struct {
	// MaxAttempts is the number of HTTP attempts per provider per job;
	// DefaultMaxAttempts when 0.
	MaxAttempts int `json:"maxAttempts,omitempty"`
	// InitialInterval is the first backoff; 250ms when 0.
	InitialInterval time.Duration `json:"initialInterval,omitempty"`
	// MaxInterval caps one backoff; 5s when 0.
	MaxInterval time.Duration `json:"maxInterval,omitempty"`
}

// BreakerConfig tunes the breakers, one per provider and model.
type BreakerConfig struct {
	// Failures is the number of consecutive provider faults that open a
	// breaker; DefaultBreakerFailures when 0.
	Failures uint32 `json:"failures,omitempty"`
	// OpenTimeout is how long a breaker stays open before one half-open
	// probe; DefaultBreakerOpenTimeout when 0.
	OpenTimeout time.Duration `json:"openTimeout,omitempty"`
}

// published are the prices providers publish for their sandbox tool; token
// prices vary by model and are left to configuration.
var published = map[string]Pricing{
	XAI: {PerToolCallUSD: xai.ToolCallUSD},
}

// backendSettings is one provider's resolved configuration.
type backendSettings struct {
	name     string
	enabled  bool
	disabled bool // explicitly, by Enabled false
	apiKey   string
	baseURL  string
	model    string
	timeout  time.Duration
	maxTurns int
	pricing  Pricing
	// rate is the key's rate limit from the configuration (Rate 0 when it
	// has none, so that an operator's limit can still apply), nil without
	// a key.
	rate *contracts.RateLimit
}

// KeyID is the id of a provider's API key in rate limits, logs and `toolq
// limits`: the first 16 hex digits of a SHA-256 of the provider and the
// key. It names the key without revealing it.
func KeyID(providerName, apiKey string) string {
	sum := sha256.Sum256([]byte("toolq provider key\x00" + providerName + "\x00" + apiKey))
	return hex.EncodeToString(sum[:contracts.KeyIDLength/2])
}

// providerRate reads pc's rate limit for the key with id keyID.
func providerRate(name, keyID string, pc *ProviderConfig) (*contracts.RateLimit, error) {
	lim := &contracts.RateLimit{Provider: name, KeyID: keyID}
	if strings.TrimSpace(pc.RateLimit) == "" {
		if pc.Burst != 0 {
			return nil, fmt.Errorf("providers: %s burst %d without a rateLimit", name, pc.Burst)
		}
		return lim, nil
	}
	rate, per, err := contracts.ParseRate(pc.RateLimit)
	if err != nil {
		return nil, fmt.Errorf("providers: %s rateLimit: %w", name, err)
	}
	lim.Rate, lim.Per, lim.Burst = rate, per, pc.Burst
	if lim.Burst == 0 {
		lim.Burst = 1
	}
	if err := lim.Validate(); err != nil {
		return nil, fmt.Errorf("providers: %s rateLimit %q burst %d: %w", name, clipString(pc.RateLimit, 32), pc.Burst, err)
	}
	return lim, nil
}

// envKeys lists each provider's environment variables, in lookup order.
var envKeys = map[string][]string{
	XAI:       {xai.EnvAPIKey},
	OpenAI:    {openai.EnvAPIKey},
	Gemini:    {gemini.EnvAPIKey, gemini.EnvAPIKeyAlt},
	Anthropic: {anthropic.EnvAPIKey},
}

var defaultModels = map[string]string{
	XAI:       xai.DefaultModel,
	OpenAI:    openai.DefaultModel,
	Gemini:    gemini.DefaultModel,
	Anthropic: anthropic.DefaultModel,
}

// normalizeModel applies each provider's model id rules.
func normalizeModel(p, id string) string {
	switch p {
	case XAI:
		return xai.NormalizeModel(id)
	case OpenAI:
		return openai.NormalizeModel(id)
	case Gemini:
		return gemini.NormalizeModel(id)
	case Anthropic:
		return anthropic.NormalizeModel(id)
	}
	return id
}

// resolve applies defaults and validates cfg. It fails on unknown provider
// names and on base URLs that are not http(s) URLs; other invalid values fall
// back to defaults with a warning.
func resolve(cfg *Config, log *slog.Logger) (map[string]*backendSettings, error) {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	var unknown []string
	for name := range cfg.Providers {
		if !provider.Known(name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("providers: unknown provider config %q (known: %s)", unknown, strings.Join(provider.Names, ", "))
	}
	if cfg.Tenants != nil && len(cfg.Tenants) == 0 {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "providers: tenants is empty: name at least one (\"\" is the default tenant) or leave it out")
	}
	for _, t := range cfg.Tenants {
		if t != "" && !contracts.ValidID(t) {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "providers: tenant %q is not a tenant id", t)
		}
	}
	out := map[string]*backendSettings{}
	for _, name := range provider.Names {
		pc := cfg.Providers[name]
		if pc == nil {
			pc = &ProviderConfig{}
		}
		s := &backendSettings{name: name, pricing: published[name]}
		if pc.Pricing != nil {
			s.pricing = *pc.Pricing
		}
		s.apiKey = strings.TrimSpace(pc.APIKey)
		for _, k := range envKeys[name] {
			if s.apiKey != "" {
				break
			}
			s.apiKey = strings.TrimSpace(getenv(k))
		}
		s.disabled = pc.Enabled != nil && !*pc.Enabled
		s.enabled = !s.disabled && s.apiKey != ""
		keyID := ""
		if s.apiKey != "" {
			keyID = KeyID(name, s.apiKey)
		}
		rate, err := providerRate(name, keyID, pc)
		if err != nil {
			return nil, err
		}
		if s.apiKey != "" {
			s.rate = rate
		}
		if pc.BaseURL != "" {
			u, err := url.Parse(pc.BaseURL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.User != nil {
				return nil, fmt.Errorf("providers: %s baseUrl %q is not an http(s) URL without query or user info", name, pc.BaseURL)
			}
			s.baseURL = strings.TrimRight(pc.BaseURL, "/")
		}
		s.model = normalizeModel(name, pc.Model)
		if !validModel(s.model) {
			log.Warn("providers: invalid model in config, using the default", "provider", name, "model", clipString(pc.Model, 64))
			s.model = defaultModels[name]
		}
		secs := pc.TimeoutSeconds
		if secs <= 0 || math.IsNaN(secs) || math.IsInf(secs, 0) || secs > 3600 {
			if secs != 0 {
				log.Warn("providers: invalid timeoutSeconds in config, using the default", "provider", name, "timeoutSeconds", secs)
			}
			secs = DefaultTimeoutSeconds
		}
		s.timeout = time.Duration(secs * float64(time.Second))
		if pc.MaxTurns > 0 {
			s.maxTurns = pc.MaxTurns
		} else if pc.MaxTurns < 0 {
			log.Warn("providers: maxTurns must be a positive integer; leaving it unset", "provider", name, "maxTurns", pc.MaxTurns)
		}
		out[name] = s
	}
	if cfg.DefaultProvider != "" && !provider.Known(cfg.DefaultProvider) {
		return nil, fmt.Errorf("providers: unknown defaultProvider %q", cfg.DefaultProvider)
	}
	return out, nil
}

func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
