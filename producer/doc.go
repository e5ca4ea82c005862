// Package producer is the Go client of requesters: it submits jobs, awaits
// their events, cancels them and reads a session's event history.
//
// # Submitting
//
// Submit validates the job and publishes it on toolq.jobs.<tool> with the
// job id as Nats-Msg-Id, so resubmitting the same id inside the duplicate
// window enqueues it once.
//
// # Awaiting
//
// Await follows a session through one ordered consumer shared by every
// waiter of that session and demultiplexes events to them. It subscribes
// first and then reads the job's last stored event, so an event published
// before the call is found as surely as one published after it.
//
// # Cancelling
//
// Cancel records the job in the toolq_cancels bucket (a queued job never
// starts), announces it to running workers, and writes the cancelled event
// unless the job already ended (ErrFinished).
package producer
