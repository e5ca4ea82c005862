package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// registerCatalog writes the catalog entries of the tools that have one. An
// entry the catalog refuses (contracts.CatalogTool.Validate) fails Start.
func (w *Worker) registerCatalog(ctx context.Context) error {
	var kv jetstream.KeyValue
	for _, t := range w.tools {
		c := t.cfg.Catalog
		if c == nil {
			continue
		}
		if kv == nil {
			var err error
			if kv, err = w.js.KeyValue(ctx, w.cfg.Subjects.CatalogBucket()); err != nil {
				return fmt.Errorf("worker: catalog bucket: %w", err)
			}
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
		entry.UpdatedAt = time.Now().UTC()
		if err := entry.Validate(); err != nil {
			return fmt.Errorf("worker: catalog entry of %s: %w", t.name, err)
		}
		data, err := json.Marshal(entry)
		if err != nil {
			return err
		}
		if _, err := kv.Put(ctx, contracts.CatalogKey(entry.ID), data); err != nil {
			return fmt.Errorf("worker: register %s in the catalog: %w", entry.ID, err)
		}
	}
	return nil
}
