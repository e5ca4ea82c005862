// Package operator is what the operator's surfaces share: the command
// line's `dlq` and `jobs ls` and the web console read and change the
// dead-letter and jobs streams through it, so both do exactly the same
// thing (RATIONALE "Operator commands: dlq and jobs ls", "Web console").
//
// # Dead letters
//
// OpenDLQ opens TOOLQ_DLQ of the toolq account. Walk reads it through an
// ordered consumer (nothing is taken out of a limits stream), Find resolves
// a sequence or a job id, Requeue republishes a dead letter's job under
// RequeueID and deletes the dead letter only after the bus acknowledged the
// job, PurgeUpTo and Delete remove dead letters.
//
// # Jobs queues
//
// Streams lists the jobs streams (the default tenant's and each tenant's),
// Queues reads one stream's queues from infos, WalkQueue reads a tool's job
// messages by sequence: nothing is consumed and no consumer is made.
//
// # Reading a stream
//
// Read walks a stream through an ordered consumer (ephemeral, no acks),
// oldest first, up to the message that was last when it began; the DLQ
// walk and the console's jobs page read through it.
//
// Every function works on a connection of the toolq account; a tenant's
// user reaches none of these streams.
package operator
