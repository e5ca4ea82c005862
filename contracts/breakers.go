package contracts

import "time"

// Breaker states of a BreakerModel.
const (
	BreakerClosed   = "closed"
	BreakerHalfOpen = "half-open"
	BreakerOpen     = "open"
)

// BreakerRecord is one worker's code_execution breakers of one provider,
// as it keeps them in the breakers bucket (Subjects.BreakersBucket) under
// BreakerKey(Provider, Worker).
type BreakerRecord struct {
	// Worker is the key's worker token (BreakerWorkerToken of its name).
	Worker   string `json:"worker"`
	Provider string `json:"provider"`
	// Breakers are the worker's breakers of the provider, one per model,
	// sorted by model.
	Breakers []BreakerModel `json:"breakers"`
	// Updated is when the worker wrote the record.
	Updated time.Time `json:"updated"`
}

// BreakerModel is the state of one provider+model breaker of a worker.
type BreakerModel struct {
	Model string `json:"model"`
	// State is BreakerClosed, BreakerHalfOpen or BreakerOpen.
	State string `json:"state"`
	// Since is the breaker's last change on this worker; zero when it has
	// not changed since the worker started (closed).
	Since time.Time `json:"since,omitzero"`
	// RetryAfterMs is, for an open breaker, how long it stays open after
	// Since before a half-open probe.
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
}

// BreakerKey is the breakers bucket's key of a worker's breakers of
// provider: "<provider>.<worker token>". Both must be ValidID.
func BreakerKey(provider, workerToken string) string { return provider + "." + workerToken }

// BreakerWorkerToken turns a worker's name into a key token: every byte
// outside [A-Za-z0-9_-] becomes "_", cut to MaxIDLength bytes ("worker" when
// empty).
func BreakerWorkerToken(name string) string {
	if name == "" {
		return "worker"
	}
	b := []byte(name)
	for i, c := range b {
		if !idByte(c) {
			b[i] = '_'
		}
	}
	return string(b[:min(len(b), MaxIDLength)])
}
