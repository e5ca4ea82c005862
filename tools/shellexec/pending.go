package shellexec

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// PendingObserver is an Observer that is also told, every
// Config.PendingScanInterval, how many approvals wait for a person and for
// how long the oldest has, by tenant ("" the default tenant). Every worker
// with exec reads the whole approvals bucket, so each reports the same
// fleet-wide figures.
type PendingObserver interface {
	Observer
	// ApprovalsPending gets the count of waiting approvals and how long the
	// oldest has waited, by tenant; a tenant with none is absent.
	ApprovalsPending(count map[string]int, oldest map[string]time.Duration)
}

// startPendingScan reads the approvals bucket on a timer for a
// PendingObserver.
func (s *ShellExec) startPendingScan() {
	po, ok := s.cfg.Observer.(PendingObserver)
	if !ok {
		return
	}
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		tick := time.NewTicker(s.cfg.PendingScanInterval)
		defer tick.Stop()
		for {
			ctx, cancel := context.WithTimeout(s.lctx, s.cfg.PendingScanInterval)
			count, oldest, err := s.scanPending(ctx, time.Now())
			cancel()
			if err == nil {
				po.ApprovalsPending(count, oldest)
			} else if s.lctx.Err() == nil {
				s.log.Debug("pending approvals not read", slog.Any("err", err))
			}
			select {
			case <-s.lctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// scanPending reads every approval record once (the bucket's latest values,
// through one watch) and sums the pending ones by tenant. The tenant is the
// key's: <tenant>.<id>, or <id> for the default tenant.
func (s *ShellExec) scanPending(ctx context.Context, now time.Time) (count map[string]int, oldest map[string]time.Duration, err error) {
	w, err := s.store.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = w.Stop() }()
	count, oldest = map[string]int{}, map[string]time.Duration{}
	for {
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, nil, errors.New("shellexec: approvals watch closed")
			}
			if e == nil {
				return count, oldest, nil // every current record read
			}
			var rec contracts.ExecApprovalRecord
			if json.Unmarshal(e.Value(), &rec) != nil || rec.Status != contracts.ExecApprovalPending {
				continue
			}
			tenant, _, named := strings.Cut(e.Key(), ".")
			if !named {
				tenant = ""
			}
			count[tenant]++
			if age := now.Sub(rec.Approval.CreatedAt); age > oldest[tenant] {
				oldest[tenant] = age
			}
		}
	}
}
