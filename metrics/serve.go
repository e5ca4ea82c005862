package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/toolq/toolq/contracts"
)

// ListenAddr resolves a --metrics-listen value: a bare port ("9464") or
// ":9464" binds 127.0.0.1, so metrics — which name tenants — are not
// served beyond the host unless an address says so ("0.0.0.0:9464" in a
// pod, where the scraper comes from outside).
func ListenAddr(addr string) (string, error) {
	if p, err := strconv.Atoi(addr); err == nil {
		if p < 0 || p > 65535 {
			return "", contracts.Errorf(contracts.CodeInvalidInput, "--metrics-listen %q: port out of range", addr)
		}
		return net.JoinHostPort("127.0.0.1", addr), nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", contracts.Errorf(contracts.CodeInvalidInput, "--metrics-listen %q: want PORT or HOST:PORT", addr)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return "", contracts.Errorf(contracts.CodeInvalidInput, "--metrics-listen %q: bad port", addr)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// Handler serves g's metrics in the Prometheus exposition formats.
func Handler(g prometheus.Gatherer, log *slog.Logger) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:            slogPrinter{log},
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	})
}

type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("metrics: " + fmt.Sprint(v...)) }

// Server serves /metrics on one address until stopped.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	log  *slog.Logger
	wg   sync.WaitGroup
	once sync.Once
	// ready is the readiness check of /readyz; nil until SetReady, and
	// then it answers 503 "starting".
	ready atomic.Pointer[func() error]
}

// errStarting is /readyz's answer before the command set its check.
var errStarting = errors.New("starting")

// SetReady sets the check /readyz answers with: 200 while it returns nil,
// else 503 and its error. A command sets it once its parts have started
// (connected, streams ensured, the engine loaded) and sets a failing one
// when it begins to stop, so a load balancer or Kubernetes stops sending
// work before the drain.
func (s *Server) SetReady(check func() error) { s.ready.Store(&check) }

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	err := errStarting
	if check := s.ready.Load(); check != nil && *check != nil {
		err = (*check)()
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
		return
	}
	_, _ = fmt.Fprintln(w, "ready")
}

// Listen binds addr (see ListenAddr) and serves g's metrics on /metrics,
// liveness on /healthz and readiness on /readyz (SetReady), until Stop.
func Listen(addr string, g prometheus.Gatherer, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	resolved, err := ListenAddr(addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", resolved)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen %s: %w", resolved, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(g, log))
	s := &Server{
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		ln:  ln, log: log,
	}
	// Liveness: the process serves. Readiness: SetReady's check.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", slog.Any("err", err))
		}
	}()
	return s, nil
}

// URL is the address of the metrics page.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() + "/metrics" }

// Stop stops serving, letting a scrape under way finish until ctx ends.
// A second Stop is harmless.
func (s *Server) Stop(ctx context.Context) error {
	var err error
	s.once.Do(func() {
		err = s.srv.Shutdown(ctx)
		s.wg.Wait()
	})
	return err
}
