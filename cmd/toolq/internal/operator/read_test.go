package operator

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/internal/testutil"
)

func TestRead(t *testing.T) {
	t.Parallel()
	srv := testutil.StartJetStream(t)
	js := testutil.JetStream(t, srv.Connect(t))
	ctx := testutil.Context(t, 10*time.Second)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R", Subjects: []string{"r.>"}})
	require.NoError(t, err)
	read := func(subjects []string, opts *ReadOpts, stopAt int) []string {
		t.Helper()
		var got []string
		require.NoError(t, Read(ctx, st, subjects, opts, func(m jetstream.Msg, _ *jetstream.MsgMetadata) error {
			got = append(got, string(m.Data()))
			if len(got) == stopAt {
				return ErrStop
			}
			return nil
		}))
		return got
	}
	require.Empty(t, read([]string{"r.>"}, nil, 0), "an empty stream")
	for i := range 600 {
		_, err := js.Publish(ctx, fmt.Sprintf("r.%c", "ab"[i%2]), fmt.Appendf(nil, "%d", i))
		require.NoError(t, err)
	}
	all := read([]string{"r.>"}, nil, 0)
	require.Len(t, all, 600, "more than one fetch")
	require.Equal(t, "0", all[0])
	require.Equal(t, "599", all[599])
	b := read([]string{"r.b"}, nil, 0)
	require.Len(t, b, 300)
	require.Equal(t, "1", b[0])
	require.Equal(t, []string{"597", "599"}, read([]string{"r.b"}, &ReadOpts{Newest: 4}, 0), "the newest 4 messages, then the filter")
	require.Equal(t, []string{"0", "1"}, read([]string{"r.>"}, nil, 2), "ErrStop ends the read")
	require.Empty(t, read([]string{"r.c"}, nil, 0), "a filter that matches nothing")
}
