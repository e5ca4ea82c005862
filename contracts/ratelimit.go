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
// of the limits bucket (RateLimitKey).
type RateLimit struct {
	// Tool is the tool the limit applies to.
	Tool string `json:"tool"`
	// Tenant is the tenant whose jobs it counts ("" for the default one).
	Tenant string `json:"tenant,omitempty"`
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
	if err := ValidateTool(r.Tool); err != nil {
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
	if RateLimitKey(lim.Tenant, lim.Tool) != key {
		return nil, Errorf(CodeInvalidInput, "rate limit under %q names tool %q of tenant %q", key, lim.Tool, lim.Tenant)
	}
	return &lim, nil
}
