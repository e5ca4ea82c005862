package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/contracts"
)

// checkServed refuses a job for a tool that no worker has ever served: the
// jobs stream holds no consumer of the tool (contracts.Subjects.
// ConsumerName). A worker's consumer is durable, so a tool whose workers
// are only away (a restart, scaled to zero) still counts as served; its
// queued jobs are the workers' queue-time limit's business. A check that
// cannot be made (no stream yet, no answer) lets the submit go on: the
// publish reports a missing stream, and a job for an unserved tool is ended
// by the queue-time limit anyway.
func (p *Producer) checkServed(ctx context.Context, tool string, prio contracts.Priority) error {
	if p.cfg.SubmitUnserved || p.cfg.TenantAccount {
		return nil
	}
	now := time.Now()
	key := p.cfg.Subjects.ConsumerNameAt(tool, prio)
	p.servedMu.Lock()
	until, ok := p.served[key]
	p.servedMu.Unlock()
	if ok && now.Before(until) {
		return nil
	}
	// The check is bounded on its own, so that a user whose permissions
	// lack consumer info (the request then gets no answer) still submits.
	cctx, cancel := context.WithTimeout(ctx, min(p.cfg.Timeout, servedCheckTimeout))
	defer cancel()
	_, err := p.js.Consumer(cctx, p.cfg.Subjects.JobsStream(), key)
	switch {
	case err == nil:
		p.servedMu.Lock()
		p.served[key] = now.Add(p.cfg.ServedTTL)
		p.servedMu.Unlock()
		return nil
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		served := p.servedTools(ctx)
		list := "none"
		if len(served) > 0 {
			list = strings.Join(served, ", ")
		}
		if prio != "" && prio != contracts.PriorityNormal && slices.Contains(served, tool) {
			return fmt.Errorf("%w: %w", ErrToolNotServed,
				contracts.Errorf(contracts.CodeInvalidInput, "no worker serves tool %q at priority %s (its workers predate priorities)", tool, prio))
		}
		return fmt.Errorf("%w: %w", ErrToolNotServed,
			contracts.Errorf(contracts.CodeInvalidInput, "no worker serves tool %q; served: %s", tool, list))
	default:
		// Remembered as served, so that a check that cannot be made is
		// paid once per ServedTTL, not on every submit.
		p.log.Warn("cannot check that a worker serves the tool; submitting anyway (may the user read $JS.API.CONSUMER.INFO of the jobs stream?)",
			slog.String("tool", tool), slog.Any("err", err))
		p.servedMu.Lock()
		p.served[key] = now.Add(p.cfg.ServedTTL)
		p.servedMu.Unlock()
		return nil
	}
}

// servedCheckTimeout bounds the served check of a submit.
const servedCheckTimeout = 2 * time.Second

// servedTools lists the tools whose consumers the jobs stream holds,
// sorted; best effort (nil when the list cannot be read).
func (p *Producer) servedTools(ctx context.Context) []string {
	st, err := p.js.Stream(ctx, p.cfg.Subjects.JobsStream())
	if err != nil {
		return nil
	}
	var tools []string
	lister := st.ListConsumers(ctx)
	for ci := range lister.Info() {
		if tool := p.cfg.Subjects.ToolOf(ci.Config.FilterSubject); tool != "" && ci.Name == p.cfg.Subjects.ConsumerName(tool) {
			tools = append(tools, tool)
		}
	}
	slices.Sort(tools)
	return slices.Compact(tools)
}
