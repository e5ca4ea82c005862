package codemode

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/worker"
)

// handleResult records the outcome of one nested call on its run and, for
// an autoResume run whose calls are all back, resumes it.
func (c *CodeMode) handleResult(ctx context.Context, job *contracts.Job) (json.RawMessage, error) {
	var tr contracts.ToolResult
	if err := json.Unmarshal(job.Input, &tr); err != nil {
		return nil, worker.Permanent(contracts.Errorf(contracts.CodeInvalidInput, "code_mode.result input: %v", err))
	}
	if err := tr.Validate(); err != nil {
		return nil, worker.Permanent(err)
	}
	// The first round may start from this worker's own last copy of the
	// record (it suspended the run): then the run is taken only by a
	// write at that copy's revision, and anything else is decided on the
	// record read from the bus.
	recent := true
	for range 20 {
		var (
			rec    *record
			rev    uint64
			cached bool
			err    error
		)
		if recent {
			rec, rev, cached = c.store.loadRecent(job.Tenant, job.Session, tr.RunID)
			recent = false
			if cached && !c.writesAt(rec, &tr) {
				cached = false
			}
		}
		if !cached {
			rec, rev, err = c.store.load(ctx, job.Tenant, job.Session, tr.RunID)
			if errors.Is(err, errNoRun) {
				return json.RawMessage(`{"recorded":false,"reason":"run gone"}`), nil
			}
			if err != nil {
				return nil, err
			}
		}
		if rec.ended() {
			return json.RawMessage(`{"recorded":false,"reason":"run ended"}`), nil
		}
		p := rec.pending(tr.CallID)
		if p == nil && tr.CallID == yieldTrigger(rec.Waits) {
			// The trigger of an autoResume run that only yielded.
			res, err := c.autoResume(ctx, rec, rev)
			if errors.Is(err, errStale) {
				continue
			}
			return res, err
		}
		if p == nil {
			if !rec.idle(time.Now()) {
				// The call may belong to the slice being recorded right now.
				return nil, worker.RetryAfter(250*time.Millisecond, errors.New("run is resuming"))
			}
			return json.RawMessage(`{"recorded":false,"reason":"no such pending call"}`), nil
		}
		if !tokenMatches(p.Token, tr.Token) {
			// A result nobody was given the token for: refused before it
			// can touch the run (record, resume, duplicate handling).
			return nil, worker.Permanent(contracts.Errorf(contracts.CodeInvalidInput, "result for call %s does not carry the call's token", tr.CallID))
		}
		if tr.JobID != "" && p.JobID != "" && tr.JobID != p.JobID {
			return nil, worker.Permanent(contracts.Errorf(contracts.CodeInvalidInput, "result for call %s comes from job %s, not %s", tr.CallID, tr.JobID, p.JobID))
		}
		if rec.hasResult(tr.CallID) {
			// Already recorded: this is a redelivery, maybe of the trigger
			// whose worker died mid-resume. An autoResume run must still be
			// resumed by someone.
			if rec.AutoResume {
				res, err := c.autoResume(ctx, rec, rev)
				if errors.Is(err, errStale) {
					continue
				}
				return res, err
			}
			return json.RawMessage(`{"recorded":false,"reason":"duplicate"}`), nil
		}
		rec.Results = append(rec.Results, settlementOf(&tr, rec.Catalog[p.ToolID]))
		if rec.AutoResume && rec.resumable(time.Now()) {
			// The last result an autoResume run waited for is recorded by
			// the write that takes the run's lease: one write, not two. A
			// conflict records nothing; the next round sees the newer
			// record.
			res, err := c.autoResume(ctx, rec, rev)
			if errors.Is(err, errStale) {
				continue
			}
			return res, err
		}
		rev, err = c.store.save(ctx, rec, rev)
		if errors.Is(err, errStale) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if rec.AutoResume {
			// A conflict here means the record moved (a submit marked its
			// calls, another result came in): go round again, where the
			// result is found recorded and the run resumed if it can be —
			// a lost race must not leave the run waiting.
			if _, err := c.autoResume(ctx, rec, rev); errors.Is(err, errStale) {
				continue
			} else if err != nil {
				return nil, err
			}
		}
		return json.RawMessage(`{"recorded":true}`), nil
	}
	return nil, errors.New("codemode: run record kept changing")
}

// writesAt reports whether a result may be recorded on a remembered copy of
// its run's record: the copy shows the run waiting, with no lease, on this
// very call, the result's token and job are the call's, and it has no
// result yet. Every such path ends in a compare-and-set write at the copy's
// revision (the result recorded, or the lease of the resume taken with it),
// so an out-of-date copy is refused by the bus and read afresh. Any other
// answer (refusal, duplicate, retry) is given only from the bus's record.
func (c *CodeMode) writesAt(rec *record, tr *contracts.ToolResult) bool {
	p := rec.pending(tr.CallID)
	return rec.Status == runWaiting && rec.Lease == nil && p != nil && p.Token != "" &&
		tokenMatches(p.Token, tr.Token) && (tr.JobID == "" || p.JobID == "" || tr.JobID == p.JobID) &&
		!rec.hasResult(tr.CallID)
}

// tokenMatches reports whether a result's token is the pending call's, in
// constant time. A call recorded without a token (its run suspended before
// tokens existed, during a rolling upgrade) takes its result without one.
func tokenMatches(want, got string) bool {
	if want == "" {
		return true
	}
	return subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// autoResume resumes an autoResume run whose calls are all back. A run
// another resume holds is tried again when that lease runs out (the holder
// may have died); errStale asks the caller to reload and look again.
func (c *CodeMode) autoResume(ctx context.Context, rec *record, rev uint64) (json.RawMessage, error) {
	now := time.Now()
	if rec.resumable(now) {
		_, err := c.resume(ctx, rec, rev, "")
		switch {
		case errors.Is(err, errStale):
			return nil, errStale
		case errors.Is(err, errBusy), errors.Is(err, errLeaseLost):
			return nil, worker.RetryAfter(c.cfg.LeaseTTL/2, errors.New("run is being resumed elsewhere"))
		case err != nil:
			return nil, err
		}
		return json.RawMessage(`{"recorded":true,"resumed":true}`), nil
	}
	if !rec.idle(now) && rec.Lease != nil && rec.allBack() {
		return nil, worker.RetryAfter(time.Until(rec.Lease.Until)+100*time.Millisecond, errors.New("run is being resumed elsewhere"))
	}
	return json.RawMessage(`{"recorded":true}`), nil
}

// settlementOf turns a nested job's outcome into what the guest gets: the
// result (checked against the tool's declared output schema) or an error.
func settlementOf(tr *contracts.ToolResult, ref catalogRef) callResult {
	r := callResult{CallID: tr.CallID, At: time.Now().UTC()}
	if tr.Status != contracts.StatusCompleted {
		msg := string(tr.Status)
		if tr.Error != nil {
			msg = tr.Error.Error()
		}
		r.Error = msg
		return r
	}
	r.Value = tr.Result
	if len(r.Value) == 0 {
		r.Value = json.RawMessage("null")
	}
	if err := checkOutput(ref.OutputSchema, r.Value); err != nil {
		r.Value, r.Error = nil, "the tool's result does not match its declared output schema: "+err.Error()
	}
	return r
}

// checkOutput validates v against schema (none: anything goes).
func checkOutput(schema, v json.RawMessage) error {
	if len(schema) == 0 || string(schema) == "{}" {
		return nil
	}
	sch, err := compileOutput(schema)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(v)))
	if err != nil {
		return err
	}
	if err := sch.Validate(inst); err != nil {
		first := err.Error()
		if i := strings.IndexByte(first, '\n'); i > 0 {
			first = first[:i]
		}
		return errors.New(first)
	}
	return nil
}

// compiledOutputs caches compiled output schemas by their text: a tool's
// schema is compiled once per worker, not at every result. Bounded: past
// maxCompiledOutputs it starts over.
var compiledOutputs = struct {
	sync.Mutex
	by map[string]*jsonschema.Schema
}{by: map[string]*jsonschema.Schema{}}

const maxCompiledOutputs = 1024

// compileOutput compiles a tool's declared output schema; an error is the
// schema's, and such a tool is kept out of the catalog.
func compileOutput(schema json.RawMessage) (*jsonschema.Schema, error) {
	key := string(schema)
	compiledOutputs.Lock()
	sch, ok := compiledOutputs.by[key]
	compiledOutputs.Unlock()
	if ok {
		return sch, nil
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(key))
	if err != nil {
		return nil, fmt.Errorf("schema unreadable: %w", err)
	}
	comp := jsonschema.NewCompiler()
	if err := comp.AddResource("output.json", doc); err != nil {
		return nil, err
	}
	sch, err = comp.Compile("output.json")
	if err != nil {
		return nil, fmt.Errorf("schema invalid: %w", err)
	}
	compiledOutputs.Lock()
	if len(compiledOutputs.by) >= maxCompiledOutputs {
		clear(compiledOutputs.by)
	}
	compiledOutputs.by[key] = sch
	compiledOutputs.Unlock()
	return sch, nil
}

var _ = slog.Default
