package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/toolq/toolq/contracts"
)

// catalogPut is one entry the worker keeps written.
type catalogPut struct {
	key  string
	data []byte
}

// registerCatalog writes the catalog entries of the tools that have one. An
// entry the catalog refuses (contracts.CatalogTool.Validate) fails Start.
// With a CatalogTTL each entry carries it, and refreshCatalog writes the
// same bytes again until the worker stops.
func (w *Worker) registerCatalog(ctx context.Context) error {
	w.catalogKV, w.catalogPuts = nil, nil
	now := time.Now().UTC()
	for _, t := range w.tools {
		c := t.cfg.Catalog
		if c == nil {
			continue
		}
		if w.catalogKV == nil {
			kv, err := w.js.KeyValue(ctx, w.cfg.Subjects.CatalogBucket())
			if err != nil {
				return fmt.Errorf("worker: catalog bucket: %w", err)
			}
			w.catalogKV = kv
		}
		entry := *c
		entry.Tool = t.name
		if entry.Source == "" {
			entry.Source = contracts.SourceToolq
		}
		if entry.Name == "" {
			entry.Name = strings.ReplaceAll(t.name, ".", "_")
		}
		if entry.ID == "" {
			entry.ID = entry.Source + ":core:" + strings.ReplaceAll(t.name, ".", "_")
		}
		entry.Tenants = slices.Clone(t.cfg.Tenants)
		entry.UpdatedAt = now
		entry.TTLSeconds = 0
		if w.cfg.CatalogTTL > 0 {
			entry.TTLSeconds = int(math.Ceil(w.cfg.CatalogTTL.Seconds()))
		}
		if err := entry.Validate(); err != nil {
			return fmt.Errorf("worker: catalog entry of %s: %w", t.name, err)
		}
		data, err := json.Marshal(entry)
		if err != nil {
			return err
		}
		put := catalogPut{key: contracts.CatalogKey(entry.ID), data: data}
		if _, err := w.catalogKV.Put(ctx, put.key, put.data); err != nil {
			return fmt.Errorf("worker: register %s in the catalog: %w", entry.ID, err)
		}
		w.catalogPuts = append(w.catalogPuts, put)
	}
	return nil
}

// refreshCatalog writes the worker's entries again every third of the
// CatalogTTL until the worker stops: the heartbeat that keeps its tools in
// the catalog. A write that fails is logged and tried at the next beat; an
// entry whose every worker is gone expires (contracts.CatalogTool.Expired).
// The same bytes are written each time, so readers can tell a refresh from
// a change.
func (w *Worker) refreshCatalog() {
	defer w.loops.Done()
	every := w.cfg.CatalogTTL / 3
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-w.runCtx.Done():
			return
		case <-tick.C:
		}
		for _, p := range w.catalogPuts {
			ctx, cancel := context.WithTimeout(w.runCtx, every)
			_, err := w.catalogKV.Put(ctx, p.key, p.data)
			cancel()
			if err != nil && w.runCtx.Err() == nil {
				w.log.Warn("catalog entry not refreshed", slog.String("key", p.key), slog.Any("err", err))
			}
		}
	}
}

// catalogRefreshes reports whether Start keeps the entries written.
func (w *Worker) catalogRefreshes() bool {
	return w.cfg.CatalogTTL > 0 && len(w.catalogPuts) > 0
}
