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
// by the queue-time limit anyway. lanes says whether the tool's workers
// take the session lanes' subjects (contracts.SessionJob); the job goes on
// its level's plain subject when not.
func (p *Producer) checkServed(ctx context.Context, tool string, prio contracts.Priority) (lanes bool, err error) {
	if p.cfg.SubmitUnserved || p.cfg.TenantAccount {
		return true, nil
	}
	now := time.Now()
	key := p.cfg.Subjects.ConsumerNameAt(tool, prio)
	p.servedMu.Lock()
	e, ok := p.served[key]
	p.servedMu.Unlock()
	if ok && now.Before(e.until) {
		return e.lanes, nil
	}
	// The check is bounded on its own, so that a user whose permissions
	// lack consumer info (the request then gets no answer) still submits.
	cctx, cancel := context.WithTimeout(ctx, min(p.cfg.Timeout, servedCheckTimeout))
	defer cancel()
	cons, err := p.js.Consumer(cctx, p.cfg.Subjects.JobsStream(), key)
	switch {
	case err == nil:
		lanes := p.servesLanes(cctx, cons, tool, prio)
		p.servedMu.Lock()
		p.served[key] = servedEntry{until: now.Add(p.cfg.ServedTTL), lanes: lanes}
		p.servedMu.Unlock()
		return lanes, nil
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		served := p.servedTools(ctx)
		list := "none"
		if len(served) > 0 {
			list = strings.Join(served, ", ")
		}
		if prio != "" && prio != contracts.PriorityNormal && slices.Contains(served, tool) {
			return false, fmt.Errorf("%w: %w", ErrToolNotServed,
				contracts.Errorf(contracts.CodeInvalidInput, "no worker serves tool %q at priority %s (its workers predate priorities)", tool, prio))
		}
		return false, fmt.Errorf("%w: %w", ErrToolNotServed,
			contracts.Errorf(contracts.CodeInvalidInput, "no worker serves tool %q; served: %s", tool, list))
	default:
		// Remembered as served, so that a check that cannot be made is
		// paid once per ServedTTL, not on every submit.
		p.log.Warn("cannot check that a worker serves the tool; submitting anyway (may the user read $JS.API.CONSUMER.INFO of the jobs stream?)",
			slog.String("tool", tool), slog.Any("err", err))
		p.servedMu.Lock()
		p.served[key] = servedEntry{until: now.Add(p.cfg.ServedTTL), lanes: true}
		p.servedMu.Unlock()
		return true, nil
	}
}

// servedEntry is a level of a tool found served, until when, and whether
// its workers take the session lanes' subjects.
type servedEntry struct {
	until time.Time
	lanes bool
}

// servesLanes reports whether the workers of tool's level take the jobs of
// every session lane: the level's consumer filters them all (lanes folded
// into one consumer), or lane 1 has a consumer of its own (lanes apart).
// Workers from before lanes filter the plain subject only; a producer then
// submits every session on it, so nothing it sends is left unserved.
func (p *Producer) servesLanes(ctx context.Context, cons jetstream.Consumer, tool string, prio contracts.Priority) bool {
	if contracts.Guarded(tool) {
		return false
	}
	if slices.Contains(cons.CachedInfo().Config.FilterSubjects, p.cfg.Subjects.JobLane(tool, prio, 1)) {
		return true
	}
	_, err := p.js.Consumer(ctx, p.cfg.Subjects.JobsStream(), p.cfg.Subjects.ConsumerNameLane(tool, prio, 1))
	return err == nil
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
		filter := ci.Config.FilterSubject
		if len(ci.Config.FilterSubjects) > 0 {
			filter = ci.Config.FilterSubjects[0] // lanes folded: lane 0 first
		}
		if tool := p.cfg.Subjects.ToolOf(filter); tool != "" && ci.Name == p.cfg.Subjects.ConsumerName(tool) {
			tools = append(tools, tool)
		}
	}
	slices.Sort(tools)
	return slices.Compact(tools)
}
