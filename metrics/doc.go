// Package metrics is toolq's Prometheus instrumentation. The runtime and
// the tool packs name no metrics library: each offers an Observer hook in
// its Config (worker.Config.Observer, codemode.Config.Observer,
// sandbox.EngineConfig.Observer, shellexec.Config.Observer, the scheduler
// engines' Observer) and this package implements them with
// prometheus/client_golang on one registry.
//
// # Series
//
// Worker: toolq_jobs_total{tool,tenant,outcome}, toolq_job_duration_seconds{tool},
// toolq_job_queue_wait_seconds{tool}, toolq_job_retries_total{tool},
// toolq_job_requeues_total{tool}, toolq_jobs_in_flight{tool},
// toolq_dead_letters_total{tool}, toolq_queue_expired_total{tenant} (jobs
// the queue sweep dead-lettered: their tool nobody served; by tenant, as
// their tool is any name a submitter chose), toolq_consumer_pending{tool,tenant} and
// toolq_consumer_ack_pending{tool,tenant}, toolq_dlq_messages{tool} and
// toolq_dlq_bytes (the whole DLQ stream, tools capped at MaxDLQTools; read
// on the worker's timer, not at scrape time). Code mode:
// toolq_codemode_suspends_total, toolq_codemode_resumes_total{from},
// toolq_codemode_snapshot_bytes, toolq_codemode_runs_stored{tenant}; the
// sandbox engine (sandbox.EngineConfig.Observer):
// toolq_codemode_vm_pool_idle, toolq_codemode_vm_pool_in_use,
// toolq_codemode_restores_total, toolq_codemode_restore_duration_seconds. Exec:
// toolq_exec_approvals_requested_total{tenant},
// toolq_exec_approvals_decided_total{tenant,verdict},
// toolq_exec_approvals_pending{tenant},
// toolq_exec_approvals_oldest_pending_seconds{tenant}. Providers:
// toolq_provider_breaker_state{provider,model}. Scheduler:
// toolq_schedule_firings_total, toolq_schedule_firing_lateness_seconds,
// toolq_schedule_catchups_total, toolq_schedule_firing_errors_total.
//
// # Cardinality
//
// No label carries a job, run, session or approval id. The tenant label is
// "" for the default tenant, the tenant's name for the first
// Config.MaxTenants named tenants seen, and OtherTenant for the rest. A
// worker's series per tool are looked up once per consumer, so a job adds
// no label lookup and no allocation.
//
// # Serving
//
// Listen serves /metrics; a bare port binds 127.0.0.1. Metrics name
// tenants: they are an operator's surface, never a tenant's.
package metrics
