package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
)

// runProgress tells a person waiting on `toolq exec --wait` what the run
// does, on stderr, as it happens: the calls it waits on, each call's end (and
// an approval a call waits for), each resume. Stdout keeps only the result.
type runProgress struct {
	g       *globals
	p       *producer.Producer
	session string
	runID   string

	mu      sync.Mutex // serializes the lines
	resumes int
	// One watcher per call, until the call ends or the run does.
	watched map[string]bool
	cancels []context.CancelFunc
	wg      sync.WaitGroup
}

// newRunProgress tells the progress of run on stderr until stop is called.
func newRunProgress(g *globals, p *producer.Producer, session, runID string) *runProgress {
	return &runProgress{g: g, p: p, session: session, runID: runID, watched: map[string]bool{}}
}

// stop ends the watchers and waits for them.
func (r *runProgress) stop() {
	for _, c := range r.cancels {
		c()
	}
	r.wg.Wait()
}

func (r *runProgress) say(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.g.tell(format, args...)
}

// show tells what a CodeModeResult of the run says: a resume since the last
// one, and, for a waiting result, the calls it waits on, each watched until
// it ends.
func (r *runProgress) show(ctx context.Context, raw json.RawMessage) {
	var res contracts.CodeModeResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return
	}
	if res.Telemetry.Resumes > r.resumes {
		r.resumes = res.Telemetry.Resumes
		r.say("run %s resumed (resume %d)", r.runID, r.resumes)
	}
	if res.Status != contracts.CodeModeWaiting {
		return
	}
	if len(res.PendingToolCalls) == 0 {
		r.say("run %s yielded (yield_control): waiting to be resumed", r.runID)
		return
	}
	names := make([]string, 0, len(res.PendingToolCalls))
	for _, c := range res.PendingToolCalls {
		names = append(names, fmt.Sprintf("%s (%s)", c.ToolID, c.CallID))
	}
	r.say("run %s waiting on %d %s: %s", r.runID, len(names), plural(len(names), "call", "calls"), strings.Join(names, ", "))
	for _, c := range res.PendingToolCalls {
		if r.watched[c.CallID] {
			continue
		}
		r.watched[c.CallID] = true
		if c.Source == contracts.SourceClient {
			r.say("call %s (%s) is a client tool: the requester answers it (producer.SubmitToolResult)", c.CallID, c.ToolID)
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		r.cancels = append(r.cancels, cancel)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.watch(wctx, c)
		}()
	}
}

// watch tells when a call's job waits for an approval and when it ends.
func (r *runProgress) watch(ctx context.Context, c contracts.CodeModePendingToolCall) {
	id := contracts.NestedJobID(r.runID, c.CallID)
	ev, err := r.p.Await(ctx, r.session, id, &producer.AwaitOpts{Parked: true})
	if err != nil {
		return
	}
	if ev.Data.Status == contracts.StatusApprovalPending {
		var pending struct {
			ApprovalID string `json:"approvalId"`
		}
		_ = json.Unmarshal(ev.Data.Result, &pending)
		r.say("call %s (%s) waiting for approval: %s (approve with `toolq approve %s`, or deny with `toolq deny %s`)",
			c.CallID, c.ToolID, pending.ApprovalID, pending.ApprovalID, pending.ApprovalID)
		if ev, err = r.p.Await(ctx, r.session, id, nil); err != nil {
			return
		}
	}
	if !ev.Data.Status.Terminal() {
		return
	}
	line := fmt.Sprintf("call %s (%s) %s", c.CallID, c.ToolID, ev.Data.Status)
	if ev.Data.Error != nil {
		line += ": " + ev.Data.Error.Error()
	}
	r.say("%s", line)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
