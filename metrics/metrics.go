package metrics

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolq/toolq/worker"
)

// OtherTenant is the tenant label value of every tenant past
// Config.MaxTenants. No tenant id can take it: ids are [A-Za-z0-9_-].
const OtherTenant = "(other)"

// Config configures Metrics. The zero value is usable.
type Config struct {
	// MaxTenants bounds the distinct tenant label values: the first
	// MaxTenants named tenants seen get a label of their own, every later
	// one shares OtherTenant. 100 by default; negative for none (every named
	// tenant is OtherTenant).
	MaxTenants int
}

// Metrics is toolq's Prometheus instrumentation: the observers of the
// worker, code mode, exec, the providers' breakers and the scheduler, all
// registered on one registry.
type Metrics struct {
	cfg Config

	mu      sync.Mutex
	tenants map[string]bool // named tenants with a label of their own

	jobs       *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	queueWait  *prometheus.HistogramVec
	retries    *prometheus.CounterVec
	requeues   *prometheus.CounterVec
	inFlight   *prometheus.GaugeVec
	deadLetter *prometheus.CounterVec
	expired    *prometheus.CounterVec
	lag        *lagCollector
	dlq        *dlqCollector

	suspends      prometheus.Counter
	resumes       *prometheus.CounterVec
	snapshotBytes prometheus.Histogram

	approvals *prometheus.CounterVec
	decisions *prometheus.CounterVec
	// pending and pendingAge are set from exec's scans; pendingSeen holds
	// the tenant labels set so far, so a tenant whose approvals are all
	// decided goes back to 0 rather than keeping its last figure.
	pending, pendingAge *prometheus.GaugeVec
	pendingMu           sync.Mutex
	pendingSeen         map[string]bool
	runsStored          *prometheus.GaugeVec
	vmIdle, vmInUse     prometheus.Gauge
	restores            prometheus.Counter
	restoreDuration     prometheus.Histogram
	runsSeen            map[string]bool

	breaker *prometheus.GaugeVec

	firings   prometheus.Counter
	lateness  prometheus.Histogram
	catchUps  prometheus.Counter
	firingErr prometheus.Counter
}

// durationBuckets spans 1 ms to about 4.4 min, by factors of 4: a noop and
// a provider's code run both land inside.
var durationBuckets = prometheus.ExponentialBuckets(0.001, 4, 10)

// New makes toolq's metrics and registers them on reg.
func New(reg prometheus.Registerer, cfg *Config) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: nil registerer")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.MaxTenants == 0 {
		c.MaxTenants = 100
	}
	m := &Metrics{cfg: c, tenants: map[string]bool{}, pendingSeen: map[string]bool{}, runsSeen: map[string]bool{}}
	m.jobs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolq_jobs_total",
		Help: "Deliveries of jobs that ended the job or its step, by tool, tenant and outcome (completed, failed, cancelled, denied, parked, dead_lettered).",
	}, []string{"tool", "tenant", "outcome"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "toolq_job_duration_seconds", Help: "Time from taking a delivery of a job to its outcome, by tool.", Buckets: durationBuckets,
	}, []string{"tool"})
	m.queueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "toolq_job_queue_wait_seconds", Help: "Time a job's message waited in its stream before its first delivery was taken, by tool.", Buckets: durationBuckets,
	}, []string{"tool"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolq_job_retries_total", Help: "Deliveries that failed with a retryable error and were handed back for a later attempt, by tool.",
	}, []string{"tool"})
	m.requeues = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolq_job_requeues_total", Help: "Deliveries handed back without an outcome (shutdown, the bus unreachable), by tool.",
	}, []string{"tool"})
	m.inFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolq_jobs_in_flight", Help: "Deliveries of jobs this worker is running now, by tool.",
	}, []string{"tool"})
	m.deadLetter = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolq_dead_letters_total", Help: "Jobs this worker moved to the DLQ, by tool.",
	}, []string{"tool"})
	m.expired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolq_queue_expired_total", Help: "Jobs this worker's queue sweep moved to the DLQ because no worker served their tool within its queue-time limit, by tenant.",
	}, []string{"tenant"})
	m.lag = &lagCollector{
		pending: prometheus.NewDesc("toolq_consumer_pending",
			"Jobs of a tool and tenant not yet delivered (the consumer's pending count), as the worker last read it.", []string{"tool", "tenant"}, nil),
		ackPending: prometheus.NewDesc("toolq_consumer_ack_pending",
			"Jobs of a tool and tenant delivered and not yet acknowledged, as the worker last read it.", []string{"tool", "tenant"}, nil),
	}
	m.dlq = &dlqCollector{
		messages: prometheus.NewDesc("toolq_dlq_messages",
			"Dead letters in the DLQ stream by tool (every worker's, not this worker's alone), as the worker last read the stream.", []string{"tool"}, nil),
		bytes: prometheus.NewDesc("toolq_dlq_bytes",
			"Bytes held by the DLQ stream, as the worker last read it.", nil, nil),
		seen: map[string]bool{},
	}

	m.suspends = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "toolq_codemode_suspends_total", Help: "Code-mode runs suspended to a snapshot (at exec and after each resume that waits again).",
	})
	m.resumes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolq_codemode_resumes_total", Help: "Code-mode resumes, by how the VM came back: restored (from its snapshot) or replayed (a restartSafe run rebuilt from its code).",
	}, []string{"from"})
	m.snapshotBytes = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "toolq_codemode_snapshot_bytes", Help: "Size of each code-mode snapshot stored.",
		Buckets: prometheus.ExponentialBuckets(1024, 4, 9), // 1 KiB .. 64 MiB
	})

	m.runsStored = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolq_codemode_runs_stored", Help: "Code-mode runs stored (suspended, waiting or resuming), by tenant, as the workers' last sweep of the runs bucket counted them (every sweep interval).",
	}, []string{"tenant"})

	m.vmIdle = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "toolq_codemode_vm_pool_idle", Help: "Warm QuickJS VMs idle in this worker's code-mode pool.",
	})
	m.vmInUse = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "toolq_codemode_vm_pool_in_use", Help: "QuickJS VMs of this worker running a code-mode exec or resume now.",
	})
	m.restores = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "toolq_codemode_restores_total", Help: "Code-mode resumes that restored a VM from a snapshot on this worker.",
	})
	m.restoreDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "toolq_codemode_restore_duration_seconds", Help: "Time a resume took to restore a VM from a snapshot (verify and decode it, take a VM, load its memory).",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9), // 100 µs .. 6.6 s
	})

	m.approvals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolq_exec_approvals_requested_total", Help: "Exec commands parked as approval_pending, by tenant.",
	}, []string{"tenant"})
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolq_exec_approvals_decided_total", Help: "Exec approvals decided, by tenant and verdict (approved, denied, expired).",
	}, []string{"tenant", "verdict"})

	m.pending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolq_exec_approvals_pending", Help: "Exec approvals waiting for a person, by tenant, as this worker last read the approvals bucket (every worker with exec reads the whole bucket).",
	}, []string{"tenant"})
	m.pendingAge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolq_exec_approvals_oldest_pending_seconds", Help: "How long the oldest waiting exec approval has waited, by tenant (0 when none waits), as this worker last read the approvals bucket.",
	}, []string{"tenant"})

	m.breaker = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolq_provider_breaker_state", Help: "State of a provider's breaker for a model: 0 closed, 1 half-open, 2 open.",
	}, []string{"provider", "model"})

	m.firings = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "toolq_schedule_firings_total", Help: "Schedule firings this scheduler enqueued as jobs.",
	})
	m.lateness = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "toolq_schedule_firing_lateness_seconds", Help: "How long after its fire time a firing was enqueued.", Buckets: durationBuckets,
	})
	m.catchUps = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "toolq_schedule_catchups_total", Help: "Missed firings made up once after the scheduler's store came back.",
	})
	m.firingErr = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "toolq_schedule_firing_errors_total", Help: "Firings that could not be enqueued this time (retried).",
	})

	for _, c := range []prometheus.Collector{
		m.jobs, m.duration, m.queueWait, m.retries, m.requeues, m.inFlight, m.deadLetter, m.expired, m.lag, m.dlq,
		m.suspends, m.resumes, m.snapshotBytes, m.runsStored, m.vmIdle, m.vmInUse, m.restores, m.restoreDuration, m.approvals, m.decisions, m.pending, m.pendingAge, m.breaker,
		m.firings, m.lateness, m.catchUps, m.firingErr,
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	return m, nil
}

// tenant is the label value of a tenant: "" for the default one, the name
// for the first MaxTenants named ones, OtherTenant past them.
func (m *Metrics) tenant(name string) string {
	if name == "" {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tenants[name] {
		return name
	}
	if len(m.tenants) >= m.cfg.MaxTenants {
		return OtherTenant
	}
	m.tenants[name] = true
	return name
}

// Worker is the worker's observer (worker.Config.Observer).
func (m *Metrics) Worker() worker.Observer { return workerObserver{m} }

type workerObserver struct{ m *Metrics }

// Tool looks up every series of one consumer once: a job's figures then go
// to them with no lookup and no allocation.
func (o workerObserver) Tool(tool, tenant string) worker.ToolObserver {
	m := o.m
	t := &toolObserver{
		duration:   m.duration.WithLabelValues(tool),
		queueWait:  m.queueWait.WithLabelValues(tool),
		retries:    m.retries.WithLabelValues(tool),
		requeues:   m.requeues.WithLabelValues(tool),
		inFlight:   m.inFlight.WithLabelValues(tool),
		deadLetter: m.deadLetter.WithLabelValues(tool),
	}
	label := m.tenant(tenant)
	for _, out := range worker.Outcomes() {
		if counted(out) {
			t.outcomes[out] = m.jobs.WithLabelValues(tool, label, out.String())
		}
	}
	return t
}

// QueueExpired counts a job the worker's queue sweep dead-lettered.
func (o workerObserver) QueueExpired(tenant string) {
	o.m.expired.WithLabelValues(o.m.tenant(tenant)).Inc()
}

// counted reports whether toolq_jobs_total counts the outcome.
func counted(o worker.Outcome) bool {
	switch o {
	case worker.OutcomeCompleted, worker.OutcomeFailed, worker.OutcomeCancelled,
		worker.OutcomeDenied, worker.OutcomeParked, worker.OutcomeDeadLettered:
		return true
	}
	return false
}

func (o workerObserver) Lag(lags []worker.ConsumerLag) { o.m.lag.set(lags, o.m.tenant) }

// DLQ keeps the dead-letter stream's size for the next scrape
// (worker.DLQObserver).
func (o workerObserver) DLQ(size worker.DLQSize) { o.m.dlq.set(size) }

type toolObserver struct {
	outcomes                      [16]prometheus.Counter
	duration, queueWait           prometheus.Observer
	retries, requeues, deadLetter prometheus.Counter
	inFlight                      prometheus.Gauge
}

func (t *toolObserver) Started(attempt int, queueWait time.Duration) {
	t.inFlight.Inc()
	if attempt == 1 {
		t.queueWait.Observe(queueWait.Seconds())
	}
}

func (t *toolObserver) Ended(out worker.Outcome, took time.Duration) {
	t.inFlight.Dec()
	switch out {
	case worker.OutcomeAnswered:
		return
	case worker.OutcomeRetried:
		t.retries.Inc()
	case worker.OutcomeRequeued:
		t.requeues.Inc()
	case worker.OutcomeDeadLettered:
		t.deadLetter.Inc()
	}
	if int(out) < len(t.outcomes) && t.outcomes[out] != nil {
		t.outcomes[out].Inc()
	}
	t.duration.Observe(took.Seconds())
}

func (t *toolObserver) DeadLettered() { t.deadLetter.Inc() }

// lagCollector serves the consumers' backlog as the worker last read it:
// it is read on the worker's timer, never at scrape time, so a scrape
// costs the bus nothing.
type lagCollector struct {
	pending, ackPending *prometheus.Desc

	mu   sync.Mutex
	last map[[2]string][2]uint64
}

func (l *lagCollector) set(lags []worker.ConsumerLag, tenant func(string) string) {
	sums := make(map[[2]string][2]uint64, len(lags))
	for _, g := range lags {
		k := [2]string{g.Tool, tenant(g.Tenant)}
		v := sums[k]
		sums[k] = [2]uint64{v[0] + g.Pending, v[1] + g.AckPending}
	}
	l.mu.Lock()
	l.last = sums
	l.mu.Unlock()
}

func (l *lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- l.pending
	ch <- l.ackPending
}

func (l *lagCollector) Collect(ch chan<- prometheus.Metric) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, v := range l.last {
		ch <- prometheus.MustNewConstMetric(l.pending, prometheus.GaugeValue, float64(v[0]), k[0], k[1])
		ch <- prometheus.MustNewConstMetric(l.ackPending, prometheus.GaugeValue, float64(v[1]), k[0], k[1])
	}
}

// OtherTool is the tool label value of toolq_dlq_messages for every tool
// past MaxDLQTools. No tool name can take it.
const OtherTool = "(other)"

// MaxDLQTools bounds the tool label values of toolq_dlq_messages: the
// first 100 tools seen with dead letters get a label of their own, later
// ones share OtherTool. A dead letter's tool is any name a job was
// submitted to (a job of a tool nobody serves is dead-lettered too), so
// the bound is needed.
const MaxDLQTools = 100

// dlqCollector serves the DLQ stream's size as the worker last read it (on
// its lag timer, never at scrape time). A tool once seen is served at 0
// when its dead letters are gone (purged, requeued, aged out).
type dlqCollector struct {
	messages, bytes *prometheus.Desc

	mu    sync.Mutex
	read  bool // the stream was read at least once
	seen  map[string]bool
	count map[string]uint64
	total uint64
}

func (d *dlqCollector) set(size worker.DLQSize) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.read, d.total = true, size.Bytes
	d.count = make(map[string]uint64, len(size.Messages))
	// Sorted, so which tools get their own label past the bound does not
	// depend on map order.
	tools := make([]string, 0, len(size.Messages))
	for t := range size.Messages {
		tools = append(tools, t)
	}
	slices.Sort(tools)
	for _, t := range tools {
		l := t
		if !d.seen[t] {
			if len(d.seen) >= MaxDLQTools {
				l = OtherTool
			}
			d.seen[l] = true
		}
		d.count[l] += size.Messages[t]
	}
}

func (d *dlqCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- d.messages
	ch <- d.bytes
}

func (d *dlqCollector) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.read {
		return
	}
	for t := range d.seen {
		ch <- prometheus.MustNewConstMetric(d.messages, prometheus.GaugeValue, float64(d.count[t]), t)
	}
	ch <- prometheus.MustNewConstMetric(d.bytes, prometheus.GaugeValue, float64(d.total))
}
