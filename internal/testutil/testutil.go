// Package testutil starts the real servers toolq's tests run against. Only
// tests may import it.
package testutil

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// Server is an in-process nats-server with JetStream on a per-test store.
type Server struct {
	*server.Server
	opts *server.Options
}

// StartJetStream starts an in-process JetStream server that listens on a
// random loopback port, with its store in a temporary directory. It is shut
// down when the test ends.
func StartJetStream(tb testing.TB) *Server {
	tb.Helper()
	return StartJetStreamAt(tb, tb.TempDir())
}

// StartJetStreamAt is StartJetStream with a given store directory, so a test
// can restart a server on the same data.
func StartJetStreamAt(tb testing.TB, storeDir string) *Server {
	tb.Helper()
	return startJetStream(tb, &server.Options{
		ServerName: "toolq-test",
		Host:       "127.0.0.1",
		Port:       -1,
		JetStream:  true,
		StoreDir:   storeDir,
		NoLog:      true,
		NoSigs:     true,
		MaxPayload: 8 << 20,
	})
}

func startJetStream(tb testing.TB, opts *server.Options) *Server {
	tb.Helper()
	ns, err := server.NewServer(opts)
	require.NoError(tb, err)
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		tb.Fatal("nats-server did not become ready")
	}
	tb.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return &Server{Server: ns, opts: opts}
}

// Restart shuts the server down and starts a new one on the same port and
// store, so connected clients reconnect to it.
func (s *Server) Restart(tb testing.TB) *Server {
	tb.Helper()
	opts := *s.opts
	opts.Port = s.Addr().(*net.TCPAddr).Port
	s.Shutdown()
	s.WaitForShutdown()
	return startJetStream(tb, &opts)
}

// Connect opens a client connection that is closed when the test ends.
func (s *Server) Connect(tb testing.TB) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	require.NoError(tb, err)
	tb.Cleanup(nc.Close)
	return nc
}

// JetStream returns a connection's JetStream context.
func JetStream(tb testing.TB, nc *nats.Conn) jetstream.JetStream {
	tb.Helper()
	js, err := jetstream.New(nc)
	require.NoError(tb, err)
	return js
}

// Context returns a context that ends with the test or after d.
func Context(tb testing.TB, d time.Duration) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}
