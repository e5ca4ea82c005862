package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/internal/bus"
)

// startTenants serves every tenant of the tenants bucket before it returns,
// then follows the bucket: a tenant added later is served within moments,
// and a removed one is no longer pulled from (its running jobs finish).
func (w *Worker) startTenants(ctx context.Context) error {
	kv, err := w.js.KeyValue(ctx, w.cfg.Subjects.TenantsBucket())
	if err != nil {
		return fmt.Errorf("worker: tenants bucket: %w", err)
	}
	watch, err := kv.WatchAll(w.runCtx) //nolint:contextcheck // the watch lives until Stop, not until Start's ctx ends
	if err != nil {
		return fmt.Errorf("worker: watch tenants: %w", err)
	}
	w.tenantMu.Lock()
	w.tenantsW = watch
	w.tenantMu.Unlock()
	// The watch sends every current entry, then nil.
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("worker: tenants: %w", ctx.Err())
		case e, ok := <-watch.Updates():
			if !ok {
				return fmt.Errorf("worker: tenants: watch closed")
			}
			if e == nil {
				w.loops.Add(1)
				go w.followTenants(watch) //nolint:contextcheck // the follow loop lives until Stop and uses the worker's run context
				return nil
			}
			if err := w.tenantChanged(ctx, e); err != nil {
				return err
			}
		}
	}
}

func (w *Worker) followTenants(watch jetstream.KeyWatcher) {
	defer w.loops.Done()
	for e := range watch.Updates() {
		if e == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(w.runCtx, w.cfg.StopTimeout+10*time.Second)
		if err := w.tenantChanged(ctx, e); err != nil {
			w.log.Error("tenant not served", slog.String("tenant", e.Key()), slog.Any("err", err))
		}
		cancel()
	}
}

// tenantChanged serves a tenant whose record was put, and stops serving one
// whose record was deleted. A malformed record is logged and skipped: one
// bad entry must not stop the worker serving every other tenant.
func (w *Worker) tenantChanged(ctx context.Context, e jetstream.KeyValueEntry) error {
	if e.Operation() != jetstream.KeyValuePut {
		w.removeTenant(e.Key())
		return nil
	}
	rec, err := bus.DecodeTenant(e.Key(), e.Value())
	if err != nil {
		w.log.Error("tenant record refused", slog.String("tenant", e.Key()), slog.Any("err", err))
		return nil
	}
	w.tenantMu.Lock()
	defer w.tenantMu.Unlock()
	if w.pullStopped {
		return nil
	}
	cfg := bus.Config{
		Subjects: w.cfg.Subjects, Replicas: w.cfg.Replicas, Storage: w.cfg.Storage,
		EventsMaxAge: w.cfg.EventsMaxAge, TenantQueueLimit: w.cfg.TenantQueueLimit,
	}
	if err := bus.EnsureTenant(ctx, w.js, cfg, rec); err != nil {
		return fmt.Errorf("worker: tenant %s: %w", rec.Name, err)
	}
	if twins, served := w.twins[rec.Name]; served {
		for _, t := range twins {
			t.weight.Store(int32(rec.Weight)) //nolint:gosec // G115: at most MaxTenantWeight
		}
		return nil // a limit or the weight changed: the stream update above is all
	}
	twins := make([]*tool, 0, len(w.tools))
	for _, t := range w.tools {
		if !t.cfg.servesTenant(rec.Name) {
			continue // kept to other tenants (ToolConfig.Tenants)
		}
		twin := &tool{name: t.name, handler: t.handler, cfg: t.cfg, slots: t.slots, parked: t.parked, tenant: rec.Name}
		twin.weight.Store(int32(rec.Weight)) //nolint:gosec // G115: at most MaxTenantWeight
		if err := w.startTool(ctx, twin); err != nil {
			for _, started := range twins {
				if cc := w.pause(started, true); cc != nil {
					<-cc.Closed()
				}
			}
			return fmt.Errorf("worker: tenant %s: %w", rec.Name, err)
		}
		twins = append(twins, twin)
	}
	w.twins[rec.Name] = twins
	w.log.Info("serving tenant", slog.String("tenant", rec.Name))
	return nil
}

func (w *Worker) removeTenant(name string) {
	w.tenantMu.Lock()
	twins := w.twins[name]
	delete(w.twins, name)
	w.tenantMu.Unlock()
	for _, t := range twins {
		if cc := w.pause(t, true); cc != nil {
			<-cc.Closed()
		}
	}
	if len(twins) > 0 {
		twins[0].slots.forget(name)
	}
	if twins != nil {
		w.log.Info("tenant removed: no longer pulling its jobs", slog.String("tenant", name))
	}
}
