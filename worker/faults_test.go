package worker_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/worker"
)

// recordHandler sends every log record to a channel, so a test waits on
// the worker's own signal.
type recordHandler struct{ ch chan slog.Record }

func newRecorder() *recordHandler { return &recordHandler{ch: make(chan slog.Record, 1024)} }

func (h *recordHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.ch <- r.Clone():
	default:
	}
	return nil
}
func (h *recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordHandler) WithGroup(string) slog.Handler      { return h }

// next waits for a record whose message is msg.
func (h *recordHandler) next(t *testing.T, msg string) slog.Record {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case r := <-h.ch:
			if r.Message == msg {
				return r
			}
		case <-timeout:
			t.Fatalf("no log record %q", msg)
		}
	}
}

func attr(r slog.Record, key string) slog.Value {
	var v slog.Value
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value
			return false
		}
		return true
	})
	return v
}

func TestConnectionLossAndReturnAreLogged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder()
	b.startWorker(t, &worker.Config{Builtins: true, Logger: slog.New(rec)}, nil)
	rec.next(t, "worker started")
	b.srv = b.srv.Restart(t)
	rec.next(t, "NATS connection lost; reconnecting")
	r := rec.next(t, "NATS connection restored")
	require.Equal(t, slog.KindDuration, attr(r, "outage").Kind())
	require.Positive(t, attr(r, "outage").Duration())
	// The worker still serves.
	job := b.submit(t, worker.ToolNoop, `{}`, nil)
	require.Equal(t, "completed", string(b.await(t, job).Data.Status))
}

// eventBodies returns the raw bodies of every stored event of a job.
func (b *bundle) eventBodies(t *testing.T, session, jobID string) [][]byte {
	t.Helper()
	ctx := testutil.Context(t, 10*time.Second)
	cons, err := b.js.OrderedConsumer(ctx, contracts.Subjects{}.EventsStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contracts.Subjects{}.Event(session, jobID)},
	})
	require.NoError(t, err)
	batch, err := cons.FetchNoWait(100)
	require.NoError(t, err)
	var out [][]byte
	for m := range batch.Messages() {
		out = append(out, m.Data())
	}
	require.NoError(t, batch.Error())
	return out
}

func TestEventsAreValidUTF8(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t, withBuiltins, func(w *worker.Worker) {
		require.NoError(t, w.Register("bad.utf8", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			return json.RawMessage("\"caf\xe9\""), nil
		}), nil))
		require.NoError(t, w.Register("bad.details", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			return nil, worker.Permanent(&contracts.Error{Code: contracts.CodeInvalidInput, Message: "no", Details: json.RawMessage("{\"path\":\"\xff\xfe\"}")})
		}), nil))
	})

	// A noop echoes an input that is not UTF-8: the job fails, clearly.
	echo := b.submit(t, worker.ToolNoop, "{\"s\":\"\xff\xfe\"}", nil)
	ev := b.await(t, echo)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Contains(t, ev.Data.Error.Message, "not valid UTF-8")

	bad := b.submit(t, "bad.utf8", `{}`, nil)
	ev = b.await(t, bad)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.Contains(t, ev.Data.Error.Message, "not valid UTF-8")

	// Details that are not UTF-8 are repaired by the encoder.
	det := b.submit(t, "bad.details", `{}`, nil)
	ev = b.await(t, det)
	require.Equal(t, contracts.StatusFailed, ev.Data.Status)
	require.JSONEq(t, `{"path":"\ufffd"}`, string(ev.Data.Error.Details))

	for _, j := range []*contracts.Job{echo, bad, det} {
		bodies := b.eventBodies(t, j.Session, j.ID)
		require.NotEmpty(t, bodies)
		for _, body := range bodies {
			require.True(t, utf8.Valid(body), "event of %s is not UTF-8: %q", j.Tool, body)
			require.True(t, json.Valid(body))
		}
	}
}

func TestMsgIDMustMatchTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var runs atomic.Int32
	b.startWorker(t, nil, func(w *worker.Worker) {
		require.NoError(t, w.Register("count.me", worker.HandlerFunc(func(context.Context, *contracts.Job) (json.RawMessage, error) {
			runs.Add(1)
			return json.RawMessage(`"done"`), nil
		}), nil))
	})
	job := b.submit(t, "count.me", `{}`, nil)
	require.Equal(t, contracts.StatusCompleted, b.await(t, job).Data.Status)

	// The same job again under another header would pass JetStream's
	// duplicate check and run the tool a second time.
	body, err := json.Marshal(job)
	require.NoError(t, err)
	ctx := testutil.Context(t, 10*time.Second)
	_, err = b.js.PublishMsg(ctx, &nats.Msg{Subject: "toolq.jobs.count.me", Data: body}, jetstream.WithMsgID(job.ID+"-again"))
	require.NoError(t, err)
	requireQueueEmpty(t, b)
	require.Equal(t, int32(1), runs.Load())
	ev := b.await(t, job)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)

	// A new job without the header, or with another one, is refused.
	for i, opt := range [][]jetstream.PublishOpt{nil, {jetstream.WithMsgID("not-the-id")}} {
		j := &contracts.Job{ID: fmt.Sprintf("hdr-%d", i), Session: "s1", Tool: "count.me", Input: json.RawMessage(`{}`)}
		body, err := json.Marshal(j)
		require.NoError(t, err)
		_, err = b.js.PublishMsg(ctx, &nats.Msg{Subject: "toolq.jobs.count.me", Data: body}, opt...)
		require.NoError(t, err)
		ev := b.await(t, j)
		require.Equal(t, contracts.StatusFailed, ev.Data.Status)
		require.Equal(t, contracts.CodeInvalidInput, ev.Data.Error.Code)
		require.Contains(t, ev.Data.Error.Message, "Nats-Msg-Id")
	}
	require.Equal(t, int32(1), runs.Load())
}

func TestOversizedDeadLetterIsStoredTruncated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder()
	b.startWorker(t, &worker.Config{Builtins: true, Logger: slog.New(rec)}, nil)
	// 1.5 MB of control bytes: not JSON, and six times larger escaped, past
	// the server's 8 MB max payload.
	body := bytes.Repeat([]byte{0x01}, 1500<<10)
	_, err := b.js.Publish(testutil.Context(t, 10*time.Second), "toolq.jobs.noop", body)
	require.NoError(t, err)

	rec.next(t, "unreadable job moved to the DLQ")
	dl := readDLQ(t, b, worker.ToolNoop)
	require.True(t, dl.JobTruncated)
	require.Equal(t, len(body), dl.JobSize)
	sum := sha256.Sum256(body)
	require.Equal(t, hex.EncodeToString(sum[:]), dl.JobSHA256)
	var excerpt string
	require.NoError(t, json.Unmarshal(dl.Job, &excerpt))
	require.NotEmpty(t, excerpt)
	require.True(t, strings.HasPrefix(string(body), excerpt))
	requireQueueEmpty(t, b)
}
