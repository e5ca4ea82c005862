package embedded_test

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/internal/embedded"
)

func TestSecondServerOnOneDirFails(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, err := embedded.Start(&embedded.Config{StoreDir: dir, Listen: "127.0.0.1:-1"})
	require.NoError(t, err)

	second, err := embedded.Start(&embedded.Config{StoreDir: dir, Listen: "127.0.0.1:-1"})
	require.Error(t, err)
	require.Nil(t, second)
	require.ErrorContains(t, err, "is in use by another server")
	require.ErrorContains(t, err, "listening on 127.0.0.1:-1")

	// The lock goes with the first server.
	first.Stop()
	again, err := embedded.Start(&embedded.Config{StoreDir: dir})
	require.NoError(t, err)
	again.Stop()
}

func TestTakenPortIsNamed(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })

	srv, err := embedded.Start(&embedded.Config{StoreDir: t.TempDir(), Listen: l.Addr().String()})
	require.Error(t, err)
	require.Nil(t, srv)
	require.ErrorContains(t, err, "is taken")

	// The failed start left its directory unlocked.
	dir := t.TempDir()
	_, err = embedded.Start(&embedded.Config{StoreDir: dir, Listen: l.Addr().String()})
	require.Error(t, err)
	srv, err = embedded.Start(&embedded.Config{StoreDir: dir})
	require.NoError(t, err)
	srv.Stop()
}
