package codeexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/codeexec/anthropic"
	"github.com/toolq/toolq/tools/codeexec/gemini"
	"github.com/toolq/toolq/tools/codeexec/internal/transport"
	"github.com/toolq/toolq/tools/codeexec/openai"
	"github.com/toolq/toolq/tools/codeexec/provider"
	"github.com/toolq/toolq/tools/codeexec/xai"
	"github.com/toolq/toolq/worker"
)

// CodeExecution is the code_execution tool: it validates a job's input,
// sends the task to a provider's server-side sandbox through that
// provider's breaker with retries inside the job's deadline, fails over to
// the providers the job allows, and returns the normalized Details.
// It is safe for concurrent use.
type CodeExecution struct {
	backends        map[string]*backend
	order           []string // enabled providers, default first
	defaultProvider string
	log             *slog.Logger
	now             func() time.Time
	newBackOff      func() backoff.BackOff
	maxAttempts     int
	jobTimeout      time.Duration
	breakerFailures uint32
	openTimeout     time.Duration
	onBreakerChange func(BreakerChange)
	// rates counts requests against the provider keys' rate limits when
	// the tool runs on a worker (Register); nil otherwise.
	rates *worker.Rates
}

type backend struct {
	backendSettings
	client   provider.Client
	breakers *breakers
}

// NewCodeExecution builds the tool from cfg (nil means the zero Config),
// applying defaults and validating once. It fails on unknown provider names
// and malformed base URLs.
func NewCodeExecution(cfg *Config) (*CodeExecution, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	settings, err := resolve(cfg, log)
	if err != nil {
		return nil, err
	}
	t := &CodeExecution{
		backends:        map[string]*backend{},
		log:             log,
		now:             cfg.Now,
		maxAttempts:     cfg.Retry.MaxAttempts,
		jobTimeout:      cfg.DefaultJobTimeout,
		breakerFailures: cfg.Breaker.Failures,
		openTimeout:     cfg.Breaker.OpenTimeout,
		onBreakerChange: cfg.OnBreakerChange,
		newBackOff:      cfg.NewBackOff,
	}
	if t.now == nil {
		t.now = time.Now
	}
	if t.maxAttempts <= 0 {
		t.maxAttempts = DefaultMaxAttempts
	}
	if t.jobTimeout <= 0 {
		t.jobTimeout = DefaultJobTimeout
	}
	if t.breakerFailures == 0 {
		t.breakerFailures = DefaultBreakerFailures
	}
	if t.openTimeout <= 0 {
		t.openTimeout = DefaultBreakerOpenTimeout
	}
	if t.newBackOff == nil {
		initial, maxIv := cfg.Retry.InitialInterval, cfg.Retry.MaxInterval
		if initial <= 0 {
			initial = 250 * time.Millisecond
		}
		if maxIv <= 0 {
			maxIv = 5 * time.Second
		}
		t.newBackOff = func() backoff.BackOff {
			b := backoff.NewExponentialBackOff()
			b.InitialInterval = initial
			b.MaxInterval = maxIv
			b.MaxElapsedTime = 0 // the job's deadline bounds retries
			b.Reset()
			return b
		}
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = defaultHTTPClient()
	}
	for _, name := range provider.Names {
		s := settings[name]
		b := &backend{backendSettings: *s}
		b.client = newClient(name, s.baseURL, hc, log, t.now)
		b.breakers = &breakers{provider: name, t: t, byModel: map[string]*breaker{}}
		t.backends[name] = b
	}
	t.defaultProvider = cfg.DefaultProvider
	if t.defaultProvider == "" {
		t.defaultProvider = XAI
		if !t.backends[XAI].enabled {
			for _, name := range provider.Names {
				if t.backends[name].enabled {
					t.defaultProvider = name
					break
				}
			}
		}
	}
	for _, name := range provider.Names {
		if t.backends[name].enabled {
			t.order = append(t.order, name)
		}
	}
	return t, nil
}

func newClient(name, base string, hc *http.Client, log *slog.Logger, now func() time.Time) provider.Client {
	switch name {
	case XAI:
		return xai.New(&xai.Config{BaseURL: base, HTTPClient: hc, Logger: log, Now: now})
	case OpenAI:
		return openai.New(&openai.Config{BaseURL: base, HTTPClient: hc, Logger: log, Now: now})
	case Gemini:
		return gemini.New(&gemini.Config{BaseURL: base, HTTPClient: hc, Logger: log, Now: now})
	default:
		return anthropic.New(&anthropic.Config{BaseURL: base, HTTPClient: hc, Logger: log, Now: now})
	}
}

// defaultHTTPClient bounds connecting and waiting for headers; the whole
// exchange is bounded by each attempt's context.
func defaultHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	tr.TLSHandshakeTimeout = 10 * time.Second
	tr.MaxIdleConnsPerHost = 32
	return &http.Client{Transport: tr}
}

// Name returns the tool name, "code_execution".
func (t *CodeExecution) Name() string { return ToolName }

// Providers returns the enabled providers (credentials resolved, not
// disabled), in the default order.
func (t *CodeExecution) Providers() []string {
	return append([]string(nil), t.order...)
}

// DefaultProvider returns the provider a job that names none goes to.
func (t *CodeExecution) DefaultProvider() string { return t.defaultProvider }

// Available reports whether provider p is enabled and would take a job
// now: some breaker of the models its jobs use lets calls through (closed,
// or half-open with its probe not yet taken), or no job has used it yet.
// The gate cannot see the next job's model; it sees the models jobs use.
func (t *CodeExecution) Available(p string) bool {
	b, ok := t.backends[p]
	if !ok || !b.enabled {
		return false
	}
	return b.breakers.accepting()
}

// ProviderStatus describes one provider for health endpoints.
type ProviderStatus struct {
	Provider string `json:"provider"`
	// Enabled reports that the provider has credentials and is not disabled.
	Enabled bool `json:"enabled"`
	// Model is the provider's default model.
	Model string `json:"model"`
	// Available is Available(Provider).
	Available bool `json:"available"`
	// Breakers holds the state of every breaker created so far, by model.
	Breakers map[string]BreakerState `json:"breakers"`
}

// Status describes every known provider, in the default order.
func (t *CodeExecution) Status() []ProviderStatus {
	out := make([]ProviderStatus, 0, len(provider.Names))
	for _, name := range provider.Names {
		b := t.backends[name]
		out = append(out, ProviderStatus{
			Provider: name, Enabled: b.enabled, Model: b.model,
			Available: t.Available(name), Breakers: b.breakers.states(),
		})
	}
	return out
}

// Accepting reports whether any enabled provider is available; while it is
// false every job would fail fast, so the worker should stop pulling.
func (t *CodeExecution) Accepting() bool {
	if len(t.order) == 0 {
		// Nothing is enabled: take jobs, so that each gets its structured
		// missing-credentials answer at once instead of waiting forever.
		return true
	}
	for _, p := range t.order {
		if t.Available(p) {
			return true
		}
	}
	return false
}

// Handle runs a code_execution job. The result is the JSON of Details;
// failures are *contracts.Error (see the package documentation for codes
// and retryability). ctx's deadline bounds every attempt and retry; without
// one, the job's timeout_ms or DefaultJobTimeout applies.
func (t *CodeExecution) Handle(ctx context.Context, job *contracts.Job) (_ json.RawMessage, err error) {
	defer func() {
		// Errors as results, never panics: a bug here must fail one job,
		// not the worker.
		if r := recover(); r != nil {
			t.log.Error("code_execution panicked", "panic", r, "stack", string(debug.Stack()))
			err = contracts.Errorf(contracts.CodeInternalError, "code_execution panicked: %v", r)
		}
	}()
	if job == nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "no job")
	}
	in, err := DecodeInput(job.Input)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, job.Timeout(t.jobTimeout))
		defer cancel()
	}
	d, err := t.Execute(ctx, in)
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(d)
	if err != nil {
		return nil, contracts.Errorf(contracts.CodeInternalError, "encode result: %v", err)
	}
	return out, nil
}

// Execute runs a validated input and returns its Details. Errors are
// *contracts.Error.
func (t *CodeExecution) Execute(ctx context.Context, in *Input) (*Details, error) {
	if err := in.Validate(); err != nil {
		return nil, err
	}
	start := t.now()
	chain := t.chain(in)
	var first *attemptError
	var trail []FailoverStep
	for i, name := range chain {
		b := t.backends[name]
		model := b.model
		if i == 0 && in.Model != "" {
			model = normalizeModel(name, in.Model)
		}
		pctx, cancel := budget(ctx, len(chain)-i)
		// Only the last provider a job may use waits for its breaker; the
		// others fail over at once. The worker counted the first provider's
		// first request before the job ran.
		taken := i == 0 && ctx.Value(firstTakenKey{}) != nil
		resp, attempts, err := t.runProvider(pctx, b, in, model, i == len(chain)-1, taken)
		if err != nil && pctx.Err() != nil && ctx.Err() == nil {
			// This provider used up its share of the deadline; the next
			// one gets the rest.
			err = &provider.Error{
				Provider: name, Kind: provider.KindTransport,
				Message: "no answer within this provider's share of the job's deadline", Err: err,
			}
		}
		cancel()
		if err == nil {
			return t.details(in, b, resp, attempts, trail, start), nil
		}
		a := &attemptError{provider: name, model: model, attempts: attempts, err: err}
		if first == nil {
			first = a
		}
		ce := toContract(ctx, a, nil)
		kind := kindOf(err)
		trail = append(trail, FailoverStep{Provider: name, Model: model, Code: string(ce.Code), Kind: kind, Message: ce.Message})
		if ctx.Err() != nil || !failoverable(err) {
			if i > 0 {
				// A later provider's permanent answer is the job's answer.
				return nil, toContract(ctx, a, trail[:len(trail)-1])
			}
			break
		}
		if i+1 < len(chain) {
			t.log.Info("code_execution failing over", "from", name, "to", chain[i+1], "kind", kind)
		}
	}
	var steps []FailoverStep
	if len(trail) > 1 {
		steps = trail[1:]
	}
	return nil, toContract(ctx, first, steps)
}

// budget bounds one provider's share of the job's deadline when more
// providers may still be tried: the remaining time split evenly, so an
// outage that hangs (rather than fails) leaves time to fail over.
func budget(ctx context.Context, left int) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok || left <= 1 {
		return context.WithCancel(ctx)
	}
	share := time.Until(deadline) / time.Duration(left)
	return context.WithTimeout(ctx, share)
}

// chain is the ordered list of providers a job may use: its provider (or
// the default), then its failover list, without repeats.
func (t *CodeExecution) chain(in *Input) []string {
	first := in.Provider
	if first == "" {
		first = t.defaultProvider
	}
	out := []string{first}
	for _, p := range in.Failover {
		dup := false
		for _, q := range out {
			dup = dup || q == p
		}
		if !dup {
			out = append(out, p)
		}
	}
	return out
}

// runProvider sends the task to one provider through its breaker, retrying
// retryable failures with backoff (at least the server's Retry-After)
// while the deadline allows. It returns the attempts made. A call the
// breaker refuses is no attempt: with wait set, the job waits for the
// breaker (its half-open time, or the end of the probe under way) when
// that fits the deadline, and asks again.
func (t *CodeExecution) runProvider(ctx context.Context, b *backend, in *Input, model string, wait, taken bool) (*provider.Response, int, error) {
	if b.disabled {
		return nil, 0, &disabledError{provider: b.name}
	}
	if b.apiKey == "" {
		return nil, 0, &missingKeyError{provider: b.name}
	}
	req := &provider.Request{Task: in.Task, Model: model, MaxTurns: b.maxTurns, APIKey: b.apiKey}
	if in.MaxTurns != nil {
		req.MaxTurns = *in.MaxTurns
	}
	timeout := b.timeout
	if in.TimeoutSeconds != nil {
		timeout = time.Duration(*in.TimeoutSeconds * float64(time.Second))
	}
	br := b.breakers.get(model)
	bo := t.newBackOff()
	attempts := 0
	for {
		if perr := provider.FromContext(ctx, b.name); perr != nil {
			return nil, attempts, perr
		}
		if !taken {
			if err := t.takeRate(ctx, b); err != nil {
				return nil, attempts, err
			}
		}
		taken = false
		attempts++
		changed := br.changes()
		resp, err := br.cb.Execute(func() (*provider.Response, error) {
			actx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			resp, err := b.client.Execute(actx, req)
			return resp, attemptTimeout(ctx, err, timeout)
		})
		if err == nil {
			return resp, attempts, nil
		}
		if isBreakerRefusal(err) {
			attempts--
			after := br.retryAfter(t)
			refusal := &breakerOpenError{provider: b.name, model: model, retryAfter: after, cause: br.lastFault.Load()}
			if deadline, ok := ctx.Deadline(); !wait || (ok && t.now().Add(after).After(deadline)) {
				return nil, attempts, refusal
			}
			t.log.Debug("code_execution waiting for its breaker", "provider", b.name, "model", model, "wait", after)
			if !waitBreaker(ctx, changed, after) {
				return nil, attempts, refusal
			}
			continue
		}
		var pe *provider.Error
		if !errors.As(err, &pe) {
			pe = &provider.Error{Provider: b.name, Kind: provider.KindTransport, Message: err.Error(), Err: err}
		}
		if pe.Fault() {
			br.lastFault.Store(pe)
		}
		if !pe.Retryable() || attempts >= t.maxAttempts {
			return nil, attempts, pe
		}
		wait := bo.NextBackOff()
		if wait == backoff.Stop {
			return nil, attempts, pe
		}
		if pe.RetryAfter > wait {
			wait = pe.RetryAfter
		}
		if deadline, ok := ctx.Deadline(); ok && t.now().Add(wait).After(deadline) {
			// The wait would outlast the job: give up now and let the
			// worker decide (the error is retryable and says how long).
			t.log.Debug("provider retry would outlast the deadline", "provider", b.name, "wait", wait)
			return nil, attempts, pe
		}
		if !sleep(ctx, wait) {
			return nil, attempts, provider.FromContext(ctx, b.name)
		}
	}
}

// takeRate takes one start of b's key's rate limit for a request the
// worker did not count (a retry, a failover), waiting for it within ctx's
// deadline (the job holds its slot meanwhile). A wait that would outlast
// the deadline is not started: the request is not made, and the error is
// a retryable rate limit with the wait as its Retry-After, as a 429 would
// be (so the job may fail over).
func (t *CodeExecution) takeRate(ctx context.Context, b *backend) error {
	if t.rates == nil || b.rate == nil {
		return nil
	}
	lim := t.rates.Effective(b.rate)
	if lim == nil {
		return nil
	}
	for {
		wait, err := t.rates.Take(ctx, lim)
		if err != nil {
			if perr := provider.FromContext(ctx, b.name); perr != nil {
				return perr
			}
			return &provider.Error{Provider: b.name, Kind: provider.KindTransport, Message: "rate limit of the provider key unreadable: " + err.Error(), Err: err}
		}
		if wait == 0 {
			return nil
		}
		if deadline, ok := ctx.Deadline(); ok && t.now().Add(wait).After(deadline) {
			return &provider.Error{
				Provider: b.name, Kind: provider.KindRateLimited, RetryAfter: wait,
				Message: fmt.Sprintf("the rate limit of this provider key (%s) has no start left within the job's deadline", lim.String()),
			}
		}
		if !sleep(ctx, min(wait, time.Second)) {
			return provider.FromContext(ctx, b.name)
		}
	}
}

// attemptTimeout turns the cancellation of one attempt by its own timeout
// (the job's context still live) into a retryable transport fault.
func attemptTimeout(ctx context.Context, err error, timeout time.Duration) error {
	var pe *provider.Error
	if err != nil && ctx.Err() == nil && errors.As(err, &pe) && pe.Kind == provider.KindCancelled {
		return &provider.Error{
			Provider: pe.Provider, Kind: provider.KindTransport,
			Message: fmt.Sprintf("no answer within the attempt timeout of %s", timeout), Err: pe,
		}
	}
	return err
}

// waitBreaker waits d, or until the breaker changes state (say, its probe
// ended), or ctx ends; it reports whether ctx is still live.
func waitBreaker(ctx context.Context, changed <-chan struct{}, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-changed:
	case <-ctx.Done():
	}
	return ctx.Err() == nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// details builds the result, clipping what would not fit a bus message.
func (t *CodeExecution) details(in *Input, b *backend, r *provider.Response, attempts int, trail []FailoverStep, start time.Time) *Details {
	d := &Details{
		Task:              in.Task,
		Provider:          b.name,
		Model:             r.Model,
		TookMs:            t.now().Sub(start).Milliseconds(),
		Content:           r.Content,
		Citations:         r.Citations,
		UsedCodeExecution: r.UsedCodeExecution,
		OutputTypes:       r.OutputTypes,
		Runs:              r.Runs,
		Images:            r.Images,
		Attempts:          attempts,
		Failover:          trail,
		Usage: Usage{
			InputTokens:     r.Usage.InputTokens,
			OutputTokens:    r.Usage.OutputTokens,
			ReasoningTokens: r.Usage.ReasoningTokens,
			ToolCalls:       r.Usage.ToolCalls,
		},
	}
	d.Usage.CostUSD, d.Usage.CostSource = estimateCost(r.Usage, b.pricing)
	if d.Citations == nil {
		d.Citations = []string{}
	}
	if d.OutputTypes == nil {
		d.OutputTypes = []string{}
	}
	if d.Runs == nil {
		d.Runs = []Run{}
	}
	if len(d.Content) > MaxContentBytes {
		d.Content, d.Truncated = transport.Clip(d.Content, MaxContentBytes), true
	}
	budget := MaxImageBytes
	clipImages := func(imgs []Image) {
		for i := range imgs {
			if n := len(imgs[i].Data); n > 0 {
				if n > budget {
					imgs[i].Data, imgs[i].Omitted, d.Truncated = "", true, true
					continue
				}
				budget -= n
			}
		}
	}
	for i := range d.Runs {
		r := &d.Runs[i]
		if len(r.Output) > MaxRunOutputBytes {
			r.Output, d.Truncated = transport.Clip(r.Output, MaxRunOutputBytes), true
		}
		if len(r.Code) > MaxRunCodeBytes {
			r.Code, d.Truncated = transport.Clip(r.Code, MaxRunCodeBytes), true
		}
		clipImages(r.Images)
	}
	clipImages(d.Images)
	if strings.TrimSpace(d.Model) == "" {
		d.Model = b.model
	}
	return d
}
