package producer_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
)

// A cancel of a job the session has no trace of says so and writes no
// event; a queued job (no event yet) is found in the queue and cancelled,
// with its tool in the event; a job of another session is not touched.
func TestCancelUnknownAndQueuedJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := testutil.Context(t, 10*time.Second)
	s := contracts.Subjects{}

	require.ErrorIs(t, b.prod.Cancel(ctx, "p", "NOPE123"), producer.ErrUnknownJob)
	last, _, err := b.events.Last(ctx, "p", "NOPE123")
	require.NoError(t, err)
	require.Nil(t, last, "no cancelled event for a job that never existed")
	// The mark is kept for the session: a submit racing the cancel is
	// still cancelled by the worker that meets it.
	kv, err := b.js.KeyValue(ctx, s.CancelsBucket())
	require.NoError(t, err)
	_, err = kv.Get(ctx, contracts.CancelKey("", "p", "NOPE123"))
	require.NoError(t, err)

	// Queued jobs behind and ahead of the one cancelled.
	for range 3 {
		_, err := b.prod.Submit(ctx, "later", json.RawMessage(`{}`), nil)
		require.NoError(t, err)
	}
	job, err := b.prod.Submit(ctx, "later", json.RawMessage(`{}`), &producer.SubmitOpts{Meta: map[string]string{"k": "v"}})
	require.NoError(t, err)
	_, err = b.prod.Submit(ctx, "other", json.RawMessage(`{}`), nil)
	require.NoError(t, err)

	// Another session knows the id, not the job.
	require.ErrorIs(t, b.prod.Cancel(ctx, "intruder", job.ID), producer.ErrUnknownJob)
	for _, session := range []string{"p", "intruder"} {
		last, _, err := b.events.Last(ctx, session, job.ID)
		require.NoError(t, err)
		require.Nil(t, last, session)
	}

	require.NoError(t, b.prod.Cancel(ctx, "p", job.ID))
	last, _, err = b.events.Last(ctx, "p", job.ID)
	require.NoError(t, err)
	require.NotNil(t, last)
	require.Equal(t, contracts.StatusCancelled, last.Data.Status)
	require.Equal(t, "later", last.Data.Tool)
	require.Equal(t, map[string]string{"k": "v"}, last.Data.Meta)
	// Again: already cancelled, no error, no second event.
	require.NoError(t, b.prod.Cancel(ctx, "p", job.ID))
}
