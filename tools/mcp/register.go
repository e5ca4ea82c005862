package mcp

import (
	"context"
	"errors"
	"fmt"

	"github.com/toolq/toolq/worker"
)

// Register connects to the servers of cfg (as New does) and adds each of
// their tools to w as mcp.<server>.<tool> with its catalog entry. The
// servers become one of w's extensions: the worker's Stop ends their
// sessions (and stops stdio servers) after its jobs drained. A failed
// Register leaves nothing connected.
func Register(ctx context.Context, w *worker.Worker, cfg *Config) (*Servers, error) {
	if w == nil {
		return nil, errors.New("mcp: nil worker")
	}
	s, err := New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	for _, tool := range s.tools {
		entry := tool.Catalog
		tc := &worker.ToolConfig{Catalog: &entry, Tenants: tool.srv.cfg.Tenants}
		if err := w.Register(tool.Name, worker.HandlerFunc(tool.Handle), tc); err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("mcp: %w", err)
		}
	}
	if err := w.Use(s); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("mcp: %w", err)
	}
	return s, nil
}

// Start lets the servers take calls again after a Stop (sessions connect
// on the next call); the servers are usable from New on, so a first Start
// has nothing to do. It makes Servers a worker.Extension.
func (s *Servers) Start(context.Context) error {
	for _, srv := range s.servers {
		srv.reopen()
	}
	return nil
}

// Stop ends every session, as Close does.
func (s *Servers) Stop(context.Context) error { return s.Close() }

func (s *server) reopen() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = false
}
