// Package worker runs toolq jobs: it consumes the jobs of its registered
// tools from JetStream, runs their handlers and publishes their events.
//
// # Consuming
//
// Every tool has one durable pull consumer (worker_<tool>) on the TOOLQ_JOBS
// work-queue stream, shared by all worker processes; each worker runs up to
// ToolConfig.Concurrency jobs of a tool at once. Jobs that run longer than a
// third of their ack wait send InProgress heartbeats.
//
// # Results and exactly one terminal event
//
// A job ends with exactly one terminal event (completed, failed, cancelled)
// on toolq.events.<session>.<job_id>. Every event write is conditional on the
// subject's last sequence, so a cancel and a completion, or two deliveries of
// the same job, cannot both end it; event ids are deterministic and
// deduplicated as well. A first delivery runs without a lookup; a redelivery
// first reads the job's last event and, when the job already ended, is
// answered from it instead of running again.
//
// # Retries and the DLQ
//
// A handler's error decides what happens: Permanent(err) or a
// *contracts.Error that is not Retryable fails the job at once; RetryAfter
// retries after a given delay; anything else is retried after the tool's
// RetryPolicy delay (exponential with jitter). When the attempts run out the
// job is written to TOOLQ_DLQ, then its failed event, then it is removed. A
// job whose worker died during its last attempt is found through JetStream's
// MAX_DELIVERIES advisory and handled the same way.
//
// # Parked and denied jobs
//
// Park(status, n) ends a job's step with a parked event (waiting,
// approval_pending) and acknowledges it; whatever continues the job later
// writes its next events with Emit. Deny(reason) ends a job with a denied
// terminal event (error code denied), never retried: a policy refusal is an
// answer, not a failure.
//
// # Nested calls
//
// A job with a Parent is a nested call of a run (a code-mode run). When it
// ends, the worker submits a job of the run's continuation tool
// (contracts.Parent.Continuation) with a contracts.ToolResult as input,
// under a deterministic id. The worker names no tool of its own: the tool
// pack that makes nested calls names its continuation.
//
// # Jobs nobody serves
//
// Every worker sweeps the jobs streams it serves for tools with no live
// consumer (none, or one with no pull waiting and no job in flight) and
// moves their jobs that waited longer than Config.MaxQueueTime (15 min by
// default; Config.MaxQueueTimes per tool) to the DLQ with a failed event,
// code runtime_unavailable, so that their requesters hear.
//
// # Cancellation and shutdown
//
// A cancel is recorded in the toolq_cancels bucket under the job's session
// and id (contracts.CancelKey), and announced on toolq.cancel.<job_id>
// with the session as the body: a queued job never starts, a running job's
// context is cancelled. A cancel that names another session than the
// job's does neither, so a job id alone cancels nothing. The worker's watch of that bucket is the one cancel
// feed of the process: tool packs follow it through OnCancel hooks. The
// worker remembers at most 100,000 recent cancels and looks a job up in the
// bucket when it had to forget some. Stop
// stops pulling, lets running jobs finish until its soft timeout, then
// cancels them and hands them back for another worker.
//
// # Extensions
//
// A tool pack with background loops of its own (code mode's expiry
// follower, exec's background sessions) is an Extension added with Use,
// usually by the pack's Register. Start starts the extensions after the
// streams exist and before any job is pulled; Stop stops them, in reverse
// order, after the jobs have drained. A Start that fails stops whatever it
// started. Start, Stop and Stopped follow internal/lifecycle: Stop before
// Start and a second Stop are harmless, a failed Start can be retried, and
// a stopped worker can start again.
//
// # The catalog
//
// A tool registered with ToolConfig.Catalog is written to the catalog
// bucket at Start with Config.CatalogTTL and written again every third of
// it while the worker runs, so code-mode runs see it while any worker
// serves it and lose it within the TTL once every one has stopped or
// died. ToolConfig.Tenants keeps a tool to some tenants: the worker pulls
// it only from their streams, and its entry names them.
//
// # Built-in tools
//
// With Config.Builtins, noop returns its input and sleep {ms} waits,
// honouring cancellation. They are diagnostics for `toolq dev`, the bench
// and tests; a production worker runs only the tools it is given.
package worker
