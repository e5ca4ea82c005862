package contracts

import "strconv"

// MaxConcurrencyLimit is the largest ConcurrencyLimit.Limit.
const MaxConcurrencyLimit = 10000

// ConcurrencyLimit caps the jobs that run at once with one key, across all
// workers (per session, per customer, per repository, …). The key is the
// tenant's own: two tenants' jobs with one key never share its slots. The
// rest wait, queued or held by a worker, without spending attempts.
type ConcurrencyLimit struct {
	// Key names the group; an id ([A-Za-z0-9_-], at most 128 bytes).
	Key string `json:"key"`
	// Limit is how many of the key's jobs may run at once, 1 to
	// MaxConcurrencyLimit. Jobs of one key should agree on it: each takes
	// one of the slots 0..Limit-1 of its key.
	Limit int `json:"limit"`
}

// Validate checks a job's concurrency limit. Its errors are invalid_input.
func (c *ConcurrencyLimit) Validate() error {
	if err := ValidateID("concurrency.key", c.Key); err != nil {
		return err
	}
	if c.Limit < 1 || c.Limit > MaxConcurrencyLimit {
		return Errorf(CodeInvalidInput, "concurrency.limit %d out of range [1, %d]", c.Limit, MaxConcurrencyLimit)
	}
	return nil
}

// ConcurrencyBucket holds the leases of concurrency slots: a KV bucket
// whose entries expire after the lease TTL unless their worker renews them.
func (s Subjects) ConcurrencyBucket() string { return s.bucket("concurrency") }

// ConcurrencyLeaseKey is the key of slot n of a concurrency key of tenant:
// d.<key>.<n> for the default tenant, t.<tenant>.<key>.<n> otherwise, so
// two tenants' keys never meet.
func ConcurrencyLeaseKey(tenant, key string, n int) string {
	return concurrencyPrefix(tenant, key) + strconv.Itoa(n)
}

func concurrencyPrefix(tenant, key string) string {
	if tenant == "" {
		return "d." + key + "."
	}
	return "t." + tenant + "." + key + "."
}

// ThrottledDetails is the result of a throttled event: what the job waits
// for before it runs.
type ThrottledDetails struct {
	// WaitingFor is "concurrency" or "rate".
	WaitingFor string `json:"waiting_for"`
	// Key and Limit are the job's concurrency key and limit.
	Key   string `json:"key,omitempty"`
	Limit int    `json:"limit,omitempty"`
	// Rate is the tool's rate limit ("60/min burst 10") for "rate".
	Rate string `json:"rate,omitempty"`
	// Provider names the provider whose API key's rate limit the job
	// waits for (Key is then empty: the event never names the key).
	Provider string `json:"provider,omitempty"`
}
