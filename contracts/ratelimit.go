package contracts

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// RateLimit caps how often jobs of a tool start, for one tenant, across
// all workers: Rate jobs per Per, with bursts of up to Burst at once. Jobs
// over it wait (they are not failed). It is the JSON value of a limit key
// of the limits bucket (LimitKey).
//
// A limit with Provider instead of Tool caps the requests made with one
// API key of a provider (KeyID, a fingerprint of the key, never the key),
// whichever tenant's job makes them: the key is shared. Without KeyID it
// is the operator's limit for every key of the provider.
type RateLimit struct {
	// Tool is the tool the limit applies to; empty for a provider's.
	Tool string `json:"tool,omitempty"`
	// Tenant is the tenant whose jobs it counts ("" for the default one).
	// A provider's limit has none.
	Tenant string `json:"tenant,omitempty"`
	// Provider and KeyID name a provider's API key (KeyID empty: every key
	// of the provider).
	Provider string `json:"provider,omitempty"`
	KeyID    string `json:"key_id,omitempty"`
	// Rate jobs per Per.
	Rate int           `json:"rate"`
	Per  time.Duration `json:"per"`
	// Burst is how many may start at once after a quiet spell; 1 at least.
	Burst int `json:"burst"`
}

// Limits on a rate limit.
const (
	MaxRateLimitRate  = 1_000_000
	MaxRateLimitBurst = 100_000
)

// Interval is the time one job's start takes from the limit's budget.
func (r *RateLimit) Interval() time.Duration { return r.Per / time.Duration(r.Rate) }

// Validate checks a rate limit. Its errors are invalid_input.
func (r *RateLimit) Validate() error {
	if r.Provider != "" || r.KeyID != "" {
		if err := r.validateProvider(); err != nil {
			return err
		}
	} else if err := ValidateTool(r.Tool); err != nil {
		return err
	}
	if r.Tenant != "" {
		if err := ValidateID("tenant", r.Tenant); err != nil {
			return err
		}
	}
	switch {
	case r.Rate < 1 || r.Rate > MaxRateLimitRate:
		return Errorf(CodeInvalidInput, "rate %d out of range [1, %d]", r.Rate, MaxRateLimitRate)
	case r.Per < time.Second || r.Per > 24*time.Hour:
		return Errorf(CodeInvalidInput, "rate period %s out of range [1s, 24h]", r.Per)
	case r.Per/time.Duration(r.Rate) < time.Microsecond:
		return Errorf(CodeInvalidInput, "rate %d per %s is faster than one a microsecond", r.Rate, r.Per)
	case r.Burst < 1 || r.Burst > MaxRateLimitBurst:
		return Errorf(CodeInvalidInput, "burst %d out of range [1, %d]", r.Burst, MaxRateLimitBurst)
	}
	return nil
}

func (r *RateLimit) validateProvider() error {
	switch {
	case r.Tool != "":
		return Errorf(CodeInvalidInput, "a rate limit names a tool or a provider, not both")
	case r.Tenant != "":
		return Errorf(CodeInvalidInput, "a provider's rate limit has no tenant: its key is shared by every tenant")
	case !ValidID(r.Provider):
		return Errorf(CodeInvalidInput, "provider %q is not a valid provider name", clip(r.Provider, 32))
	case r.KeyID != "" && !ValidKeyID(r.KeyID):
		return Errorf(CodeInvalidInput, "key id %q: want %d lowercase hex digits", clip(r.KeyID, 32), KeyIDLength)
	}
	return nil
}

// KeyIDLength is the length of a provider key's id (hex digits).
const KeyIDLength = 16

// ValidKeyID reports whether s is a provider key's id: KeyIDLength
// lowercase hex digits.
func ValidKeyID(s string) bool {
	if len(s) != KeyIDLength {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Subject names what the limit counts: its tool, "provider <p>" or
// "provider <p> key <id>".
func (r *RateLimit) Subject() string {
	switch {
	case r.Provider == "":
		return r.Tool
	case r.KeyID == "":
		return "provider " + r.Provider
	default:
		return "provider " + r.Provider + " key " + r.KeyID
	}
}

// LimitKey is the key the limit is stored under in the limits bucket.
func (r *RateLimit) LimitKey() string { return "limit." + r.scope() }

// StateKey is the key of the limit's state (RateStateKey,
// ProviderRateStateKey).
func (r *RateLimit) StateKey() string { return "tat." + r.scope() }

// OverrideKeys are the keys of the limits bucket whose limit replaces r
// when r is a default (a tool pack's, from its configuration), first match
// first: a provider key's own limit, then its provider's.
func (r *RateLimit) OverrideKeys() []string {
	if r.Provider != "" && r.KeyID != "" {
		return []string{r.LimitKey(), ProviderRateLimitKey(r.Provider, "")}
	}
	return []string{r.LimitKey()}
}

func (r *RateLimit) scope() string {
	if r.Provider != "" {
		return providerScope(r.Provider, r.KeyID)
	}
	return limitScope(r.Tenant, r.Tool)
}

func providerScope(provider, keyID string) string {
	if keyID == "" {
		return "p." + provider
	}
	return "p." + provider + "." + keyID
}

// ProviderRateLimitKey is the key of a provider key's rate limit,
// limit.p.<provider>.<key id>, or with keyID empty of the limit for every
// key of the provider, limit.p.<provider>.
func ProviderRateLimitKey(provider, keyID string) string {
	return "limit." + providerScope(provider, keyID)
}

// ProviderRateStateKey is the key of a provider key's GCRA state,
// tat.p.<provider>.<key id>, written by workers only.
func ProviderRateStateKey(provider, keyID string) string {
	return "tat." + providerScope(provider, keyID)
}

// String writes the limit as ParseRate reads it, with its burst.
func (r *RateLimit) String() string {
	unit := r.Per.String()
	switch r.Per {
	case time.Second:
		unit = "s"
	case time.Minute:
		unit = "min"
	case time.Hour:
		unit = "h"
	}
	return strconv.Itoa(r.Rate) + "/" + unit + " burst " + strconv.Itoa(r.Burst)
}

// ParseRate reads "60/min", "10/s", "1000/h" or "5/30s". Its errors are
// invalid_input.
func ParseRate(s string) (int, time.Duration, error) {
	n, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	rate, err := strconv.Atoi(n)
	if !ok || err != nil || rate < 1 {
		return 0, 0, Errorf(CodeInvalidInput, "rate %q: want <count>/<s|min|h|duration>, e.g. 60/min", clip(s, 32))
	}
	var per time.Duration
	switch unit {
	case "s", "sec", "second":
		per = time.Second
	case "m", "min", "minute":
		per = time.Minute
	case "h", "hour":
		per = time.Hour
	default:
		if per, err = time.ParseDuration(unit); err != nil {
			return 0, 0, Errorf(CodeInvalidInput, "rate %q: unknown period %q", clip(s, 32), clip(unit, 16))
		}
	}
	return rate, per, nil
}

// LimitsBucket holds the rate limits (keys RateLimitKey) and their state
// (RateStateKey): what the workers read and write before each limited job.
func (s Subjects) LimitsBucket() string { return s.bucket("limits") }

func limitScope(tenant, tool string) string {
	if tenant == "" {
		return "d." + tool
	}
	return "t." + tenant + "." + tool
}

// RateLimitKey is the key of tool's rate limit for tenant:
// limit.d.<tool> or limit.t.<tenant>.<tool>.
func RateLimitKey(tenant, tool string) string { return "limit." + limitScope(tenant, tool) }

// RateStateKey is the key of the limit's state (the theoretical arrival
// time of the next start, GCRA), written by workers only.
func RateStateKey(tenant, tool string) string { return "tat." + limitScope(tenant, tool) }

// DecodeRateLimit reads a limit stored under key: valid, and naming the
// tenant and tool of its key.
func DecodeRateLimit(key string, data []byte) (*RateLimit, error) {
	var lim RateLimit
	if err := json.Unmarshal(data, &lim); err != nil {
		return nil, Errorf(CodeInvalidInput, "rate limit %s: %v", key, err)
	}
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	if lim.LimitKey() != key {
		return nil, Errorf(CodeInvalidInput, "rate limit under %q names %s of tenant %q", key, clip(lim.Subject(), 64), lim.Tenant)
	}
	return &lim, nil
}
