package integration

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/tracing"
	"github.com/toolq/toolq/worker"
)

func spanAttr(s sdktrace.ReadOnlySpan, key string) string {
	for _, a := range s.Attributes() {
		if a.Key == attribute.Key(key) {
			return a.Value.String()
		}
	}
	return ""
}

// TestTenancyTraces: a traceparent is requester input. Every span of a
// tenant's job names the tenant of the subject the job came in on, never
// anything the requester sent; a code-mode run of ACME is one trace of
// ACME's spans. GLOBEX, sending a forged traceparent with ACME's trace id,
// can at most put its own job's span — labelled GLOBEX — under that id in
// the operator's trace backend: it becomes the parent of no ACME span, and
// no span reaches a tenant (traces go to the operator's collector only).
func TestTenancyTraces(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	tr, err := tracing.New(context.Background(), &tracing.Config{Processor: rec, SampleRatio: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	b := setupTenancy(t, tr)
	ctx := testutil.Context(t, 30*time.Second)
	const acmeTP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	in, _ := json.Marshal(map[string]any{"code": `return (await tools.callValue("toolq:core:noop", {x: 1})).x;`, "autoResume": true})
	run, err := b.acmeP.Submit(ctx, contracts.ToolCodeModeExec, in, &producer.SubmitOpts{TraceParent: acmeTP})
	require.NoError(t, err)
	ev, err := b.acmeP.Await(ctx, run.Session, run.ID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, string(ev.Data.Result))
	forged, err := b.globexP.Submit(ctx, worker.ToolNoop, json.RawMessage(`{"tenant":"ACME"}`), &producer.SubmitOpts{TraceParent: acmeTP})
	require.NoError(t, err)
	_, err = b.globexP.Await(ctx, forged.Session, forged.ID, nil)
	require.NoError(t, err)

	deadline := time.Now().Add(20 * time.Second)
	var acme, globex []sdktrace.ReadOnlySpan
	for {
		acme, globex = nil, nil
		for _, s := range rec.Ended() {
			switch spanAttr(s, worker.AttrTenant) {
			case "ACME":
				acme = append(acme, s)
			case "GLOBEX":
				globex = append(globex, s)
			default:
				t.Fatalf("span %s names no tenant: %v", s.Name(), s.Attributes())
			}
		}
		// exec, noop, the report, a suspension and a resume; the forged job.
		if len(acme) >= 5 && len(globex) >= 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "spans: ACME %d, GLOBEX %d", len(acme), len(globex))
		time.Sleep(10 * time.Millisecond) // polling the recorder the worker writes to
	}
	acmeIDs := map[string]bool{}
	for _, s := range acme {
		require.Equal(t, "0af7651916cd43dd8448eb211c80319c", s.SpanContext().TraceID().String(), s.Name())
		acmeIDs[s.SpanContext().SpanID().String()] = true
	}
	require.Len(t, globex, 1)
	g := globex[0]
	require.Equal(t, forged.ID, spanAttr(g, worker.AttrJobID))
	// Under the id it named, but labelled with its own tenant, and the
	// child of no ACME span nor the parent of any.
	require.Equal(t, "0af7651916cd43dd8448eb211c80319c", g.SpanContext().TraceID().String())
	require.False(t, acmeIDs[g.Parent().SpanID().String()])
	for _, s := range acme {
		require.NotEqual(t, g.SpanContext().SpanID(), s.Parent().SpanID(), "an ACME span under GLOBEX's")
	}
}
