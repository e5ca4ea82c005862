package ui

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/internal/lifecycle"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/scheduler"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// ErrStarted is Start's error while the console runs.
var ErrStarted = errors.New("ui: console already started")

// Server is the web console: server-rendered pages over the toolq
// account's streams and buckets, and a live feed from NATS subscriptions.
type Server struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	cfg   Config
	log   *slog.Logger
	guard *guard
	pages map[string]*template.Template
	hub   *hub
	life  *lifecycle.Service
	mux   *http.ServeMux

	// Set by start.
	p     *producer.Producer
	sched *scheduler.Client
	srv   *http.Server
	ln    net.Listener
	wg    sync.WaitGroup
	url   string
}

// New makes the console on nc, a connection of the toolq account (an
// operator's). It refuses a non-loopback Listen without a token.
func New(nc *nats.Conn, cfg *Config) (*Server, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	host, _, _ := net.SplitHostPort(c.Listen)
	s := &Server{
		nc: nc, js: js, cfg: c, log: c.Logger, hub: newHub(c.Subjects),
		guard: newGuard(c.Token, hex.EncodeToString(secret), Loopback(host)),
	}
	if s.pages, err = parsePages(); err != nil {
		return nil, err
	}
	s.mux = s.routes()
	s.life = lifecycle.New(&lifecycle.Config{Start: s.start, Stop: s.stop, ErrStarted: ErrStarted})
	return s, nil
}

// Start listens, subscribes and serves; it returns once the console
// answers.
func (s *Server) Start(ctx context.Context) error { return s.life.Start(ctx) }

// Stop ends the live feeds and the server, letting requests in flight
// finish until ctx ends.
func (s *Server) Stop(ctx context.Context) error { return s.life.Stop(ctx) }

// Stopped is closed whenever the console is not running.
func (s *Server) Stopped() <-chan struct{} { return s.life.Stopped() }

// URL is the console's address once started (http://host:port/).
func (s *Server) URL() string { return s.url }

// Handler is the console's HTTP handler with its access control, for
// tests and for mounting elsewhere. Pages that read the bus need Start.
func (s *Server) Handler() http.Handler { return s.guard.wrap(s.mux) }

func (s *Server) start(ctx context.Context) error {
	p, err := producer.New(s.nc, &producer.Config{
		Subjects: s.cfg.Subjects, Session: s.cfg.DecideSession, Timeout: s.cfg.Timeout, Logger: s.log, Name: "toolq console",
	})
	if err != nil {
		return err
	}
	sched, err := scheduler.NewClient(s.nc, &scheduler.ClientConfig{Subjects: s.cfg.Subjects, Timeout: s.cfg.Timeout, Logger: s.log})
	if err != nil {
		p.Close()
		return err
	}
	if err := s.hub.subscribe(s.nc); err != nil {
		p.Close()
		return fmt.Errorf("ui: subscribe: %w", err)
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		s.hub.close()
		s.hub = newHub(s.cfg.Subjects)
		p.Close()
		return fmt.Errorf("ui: listen: %w", err)
	}
	s.p, s.sched, s.ln = p, sched, ln
	s.url = "http://" + ln.Addr().String() + "/"
	s.srv = &http.Server{
		// No write timeout: the live feeds are long responses.
		Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.wg.Go(func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("console server", slog.Any("err", err))
		}
	})
	s.log.Info("web console", slog.String("url", s.url))
	return nil
}

func (s *Server) stop(ctx context.Context) error {
	// The live feeds first: their handlers would hold Shutdown up.
	s.hub.close()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	s.wg.Wait()
	s.p.Close()
	s.hub = newHub(s.cfg.Subjects)
	return err
}

// parsePages parses each page with the layout: one template set a page.
func parsePages() (map[string]*template.Template, error) {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		if n == "templates/layout.html" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("ui: template %s: %w", n, err)
		}
		out[n[len("templates/"):len(n)-len(".html")]] = t
	}
	return out, nil
}
