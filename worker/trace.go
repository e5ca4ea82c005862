package worker

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/internal/bus"
)

type traceKey struct{}

func withTraceParent(ctx context.Context, tp string) context.Context {
	return context.WithValue(ctx, traceKey{}, tp)
}

func traceParent(ctx context.Context) string {
	tp, _ := ctx.Value(traceKey{}).(string)
	return tp
}

type headersKey struct{}

// Header returns a header of the message the running job came in, "" when
// it has none: for handlers that read what a requester sent beside the job
// (contracts.HeaderCatalogSeq). Headers are the requester's to set: treat
// them as untrusted input.
func Header(ctx context.Context, name string) string {
	h, _ := ctx.Value(headersKey{}).(nats.Header)
	if h == nil {
		return ""
	}
	return h.Get(name)
}

// TraceParent returns the W3C traceparent the running job carried, if any,
// so a handler can pass it on to the jobs it submits.
func TraceParent(ctx context.Context) string { return traceParent(ctx) }

func traceOf(msg jetstream.Msg) string {
	if h := msg.Headers(); h != nil {
		return h.Get(bus.HeaderTraceParent)
	}
	return ""
}
