// Package scheduler submits toolq jobs later and periodically: delayed
// schedules (at a time, or in a duration) and periodic ones (every whole
// number of seconds, or a cron expression in a time zone).
//
// # Schedules
//
// A Schedule names a job template (tool, session, input, …) and when to
// submit it. Schedules are stored in the NATS KV bucket <prefix>_schedules,
// whatever the engine, so they survive restarts of the scheduler, of Redis
// and of NATS, and `toolq schedule add|ls|rm` works with any engine running.
// Bad input — an invalid cron expression, an unknown time zone, an `at` in
// the past, an interval under a second, an invalid tool, id or input — is
// refused by Create with a *contracts.Error of code invalid_input, never at
// firing time.
//
// # Engines
//
// Two engines implement the Scheduler interface and pass one shared test
// suite (package schedulertest):
//
//   - NATS (NewNATS): JetStream message schedules (nats-server ≥ 2.14). Each
//     schedule is a message with a Nats-Schedule header in the jobs stream;
//     the server fires it onto <prefix>.schedules.fire.<id>, and a relay
//     consumer turns each firing into a job. No Redis needed, so it is the
//     engine for `toolq dev` and embedded servers.
//   - asynq (NewAsynq): asynq's Scheduler for periodic schedules and
//     ProcessAt tasks for delayed ones, on Redis. Its server also takes
//     TaskSubmit tasks from services already on asynq (the ingress).
//
// # One job per firing
//
// The job of a firing has the id "<schedule id>-<fire time in Unix
// seconds>", which is also its Nats-Msg-Id: however many scheduler instances
// run, and however often a firing is retried, JetStream enqueues it once
// (within its duplicate window, 2 minutes or more); beyond that the last fire
// time kept in the bucket stops older firings.
//
// # Time
//
// Fire times are whole seconds: asynq's scores and NATS @at times are whole
// seconds, so At is rounded up to the next second and Every must be a whole
// number of seconds. Cron expressions have five fields (minute resolution),
// the form asynq's Scheduler parses; the NATS engine adds the seconds field
// its server expects.
//
// # Missed firings
//
// The policy is catch up once: when a scheduler (or Redis, or NATS) was down
// across one or more fire times, the latest missed firing is submitted once
// when it is back, and older ones are skipped. A delayed schedule whose time
// passed while nothing ran fires once, late.
package scheduler
