package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/metrics"
)

// metricsFlags is --metrics-listen and its companions, on every
// long-running command.
type metricsFlags struct {
	listen     string
	maxTenants int
}

func (f *metricsFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.listen, "metrics-listen", "",
		"serve Prometheus metrics on HOST:PORT/metrics, and /healthz and /readyz (a bare PORT or :PORT binds 127.0.0.1; off when empty)")
	cmd.Flags().IntVar(&f.maxTenants, "metrics-max-tenants", 100,
		"named tenants with a tenant label of their own; later ones share the label \"(other)\"")
}

// metricsSurface is a command's metrics: the observers and their server.
// A nil surface (no --metrics-listen) has nil observers.
type metricsSurface struct {
	m   *metrics.Metrics
	srv *metrics.Server
}

// start makes the registry (toolq's series and the Go runtime's and the
// process's) and serves it; nil without --metrics-listen.
func (f *metricsFlags) start(g *globals) (*metricsSurface, error) {
	if f.listen == "" {
		return nil, nil
	}
	if f.maxTenants < 0 {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "--metrics-max-tenants must not be negative")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	maxTenants := f.maxTenants
	if maxTenants == 0 {
		maxTenants = -1 // every named tenant is "(other)"
	}
	m, err := metrics.New(reg, &metrics.Config{MaxTenants: maxTenants})
	if err != nil {
		return nil, err
	}
	srv, err := metrics.Listen(f.listen, reg, g.log)
	if err != nil {
		return nil, err
	}
	g.log.Info("serving metrics", slog.String("url", srv.URL()))
	return &metricsSurface{m: m, srv: srv}, nil
}

func (s *metricsSurface) stop() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Stop(ctx)
}

// ready marks the command ready on /readyz while nc is connected; notReady
// marks it stopping (SIGTERM: the drain begins).
func (s *metricsSurface) ready(nc *nats.Conn) {
	if s == nil {
		return
	}
	s.srv.SetReady(func() error {
		if st := nc.Status(); st != nats.CONNECTED {
			return fmt.Errorf("nats connection %s", st)
		}
		return nil
	})
}

func (s *metricsSurface) notReady(why string) {
	if s == nil {
		return
	}
	err := errors.New(why)
	s.srv.SetReady(func() error { return err })
}

func (s *metricsSurface) metrics() *metrics.Metrics {
	if s == nil {
		return nil
	}
	return s.m
}
