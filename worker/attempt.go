package worker

import "context"

type attemptKey struct{}

// Attempt returns which delivery of the running job this is (1 for the
// first; more after a worker stopped without an answer or a retry), or 0
// outside a handler. A job republished under the same id after the
// duplicate window is a new message and starts again at 1, so a handler
// can tell a redelivery from a replay.
func Attempt(ctx context.Context) int {
	n, _ := ctx.Value(attemptKey{}).(int)
	return n
}
