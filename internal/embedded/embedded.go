// Package embedded runs an in-process nats-server with JetStream, the
// default bus of `toolq dev` and `toolq bench`.
package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Config configures an embedded server.
type Config struct {
	// Listen is host:port for clients; empty means in-process connections only.
	Listen string
	// StoreDir keeps JetStream data; it survives restarts.
	StoreDir string
	// Logs turns on the server's own logging, through Logger.
	Logs bool
	// Logger receives the server's logs (with Logs), as records with
	// component=nats-server; the server's own stderr logger when nil.
	Logger *slog.Logger
	// ConfigFile is a nats-server configuration file read first (accounts,
	// users, permissions); StoreDir, Listen and the fields above still
	// apply over it, and JetStream is on.
	ConfigFile string
}

// Server is a running embedded nats-server.
type Server struct {
	*server.Server
	listening bool
	unlock    func()
}

// Start starts the server and waits until it accepts connections.
func Start(cfg *Config) (*Server, error) {
	if cfg == nil || cfg.StoreDir == "" {
		return nil, errors.New("embedded: a store directory is required")
	}
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		var err error
		if opts, err = server.ProcessConfigFile(cfg.ConfigFile); err != nil {
			return nil, fmt.Errorf("embedded: %w", err)
		}
	}
	opts.ServerName, opts.JetStream, opts.StoreDir = "toolq-dev", true, cfg.StoreDir
	opts.NoSigs, opts.NoLog, opts.MaxPayload = true, !cfg.Logs, 8<<20
	unlock, err := lockDir(cfg.StoreDir, cfg.Listen)
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			unlock()
		}
	}()
	if cfg.Listen == "" {
		opts.DontListen = true
	} else {
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded: listen address %q: %w", cfg.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < -1 || p > 65535 {
			return nil, fmt.Errorf("embedded: listen port %q invalid", port)
		}
		opts.Host, opts.Port = host, p
		if p > 0 {
			// Say so at once: the server itself would retry the port and
			// report only that it never became ready.
			l, err := net.Listen("tcp", cfg.Listen)
			if err != nil {
				return nil, fmt.Errorf("embedded: listen address %s is taken (another toolq dev or nats-server?); pick another with --listen: %w", cfg.Listen, err)
			}
			_ = l.Close()
		}
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	switch {
	case cfg.Logs && cfg.Logger != nil:
		ns.SetLoggerV2(&serverLogger{log: cfg.Logger.With(slog.String("component", "nats-server"))}, false, false, false)
	case cfg.Logs:
		ns.ConfigureLogger()
	}
	ns.Start()
	if !ns.ReadyForConnections(15 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded: nats-server did not become ready")
	}
	started = true
	return &Server{Server: ns, listening: !opts.DontListen, unlock: unlock}, nil
}

// Connect opens an in-process client connection.
func (s *Server) Connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.InProcessServer(s.Server), nats.MaxReconnects(-1)}, opts...)
	return nats.Connect("", opts...)
}

// URL is the client URL, or "" for an in-process-only server.
func (s *Server) URL() string {
	if !s.listening {
		return ""
	}
	return s.ClientURL()
}

// Stop shuts the server down and waits for it.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
	if s.unlock != nil {
		s.unlock()
	}
}

// serverLogger sends nats-server's logs to slog.
type serverLogger struct{ log *slog.Logger }

func (l *serverLogger) Noticef(format string, v ...any) { l.log.Info(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Warnf(format string, v ...any)   { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Fatalf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Errorf(format string, v ...any)  { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Debugf(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Tracef(format string, v ...any)  { l.log.Debug(fmt.Sprintf(format, v...)) }
