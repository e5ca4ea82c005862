package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
)

// batchLine is one line of a `submit --from` file: a job, with the
// command's flags as defaults for what it leaves out.
type batchLine struct {
	ID      string            `json:"id,omitempty"`
	Tool    string            `json:"tool,omitempty"`
	Session string            `json:"session,omitempty"`
	Input   json.RawMessage   `json:"input,omitempty"`
	Meta    map[string]string `json:"meta,omitempty"`
	// Priority is high, normal or low; --priority's when empty.
	Priority string `json:"priority,omitempty"`
	// Concurrency caps the jobs of its key that run at once.
	Concurrency *contracts.ConcurrencyLimit `json:"concurrency,omitempty"`
}

// maxBatchLine bounds one line of a batch file (a job's input included).
const maxBatchLine = 8 << 20

// submitFrom submits every job of the JSON Lines file path with
// SubmitBatch. A line without an id gets one derived from its place and
// its bytes, so a rerun of the same file gives the same ids and the bus
// enqueues nothing twice; and the file's progress (lines acknowledged in
// order) is kept in path+".progress", so a rerun after a crash starts
// after them and needs no duplicate window at all. Progress goes to
// stderr, the summary to stdout.
func submitFrom(ctx context.Context, g *globals, p *producer.Producer, path string, def batchLine) error {
	jobs, err := readBatch(path, def)
	if err != nil {
		return err
	}
	progressFile := path + ".progress"
	done := 0
	if b, err := os.ReadFile(progressFile); err == nil { //nolint:gosec // G304: next to the file the operator named
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 && n <= len(jobs) {
			done = n
		}
	}
	if done > 0 {
		g.tell("submit: %d of %d jobs were acknowledged by an earlier run (%s); going on from there", done, len(jobs), progressFile)
	}
	total, acked := len(jobs), done
	step := max(total/20, 1)
	save := func() { _ = os.WriteFile(progressFile, []byte(strconv.Itoa(acked)+"\n"), 0o600) }
	res, err := p.SubmitBatch(ctx, jobs[done:], &producer.BatchOpts{OnAck: func(i int, _ *contracts.Job, _ error) {
		acked = done + i + 1
		if acked%step == 0 || acked == total {
			g.tell("submit: %d/%d (%d%%)", acked, total, acked*100/total)
			save()
		}
	}})
	save()
	if err != nil {
		return err
	}
	summary := map[string]any{"file": path, "jobs": total, "skipped": done, "submitted": res.Submitted, "duplicates": res.Duplicates, "failed": res.Failed}
	if res.Failed > 0 {
		errs := map[string]string{}
		for i, e := range res.Errors {
			errs[strconv.Itoa(done+i+1)] = e.Error()
		}
		summary["errors"] = errs
	}
	if g.jsonOut {
		if err := g.printJSON(summary); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(g.stdout, "%d jobs: %d submitted, %d already on the bus, %d skipped (done before), %d failed\n",
			total, res.Submitted, res.Duplicates, done, res.Failed)
		for i := range total - done {
			if e, ok := res.Errors[i]; ok {
				fmt.Fprintf(g.stdout, "  line %d: %v\n", done+i+1, e)
			}
		}
	}
	if res.Failed > 0 {
		return contracts.Errorf(contracts.CodeInvalidInput, "%d of %d jobs were refused", res.Failed, total)
	}
	return nil
}

// readBatch reads a JSON Lines file of jobs; blank lines are skipped, a
// line that is not a job object fails the whole file before anything is
// sent.
func readBatch(path string, def batchLine) ([]*contracts.Job, error) {
	f, err := os.Open(path) //nolint:gosec // G304: the operator names the batch file
	if err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "--from %s: %v", path, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), maxBatchLine)
	var jobs []*contracts.Job
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var l batchLine
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "--from %s: line %d is not a job (id, tool, session, input, meta, priority, concurrency): %v", path, n, err)
		}
		if l.Tool == "" {
			l.Tool = def.Tool
		}
		if l.Session == "" {
			l.Session = def.Session
		}
		if l.Priority == "" {
			l.Priority = def.Priority
		}
		prio, err := contracts.ParsePriority(l.Priority)
		if err != nil {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "--from %s: line %d: %v", path, n, err)
		}
		if l.ID == "" {
			sum := sha256.Sum256(append([]byte(strconv.Itoa(n)+"\x00"), line...))
			l.ID = "b" + hex.EncodeToString(sum[:12])
		}
		if l.Tool == "" {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "--from %s: line %d names no tool (and --tool gives none)", path, n)
		}
		jobs = append(jobs, &contracts.Job{ID: l.ID, Tool: l.Tool, Session: l.Session, Input: l.Input, Meta: l.Meta, Priority: prio, Concurrency: l.Concurrency})
	}
	if err := sc.Err(); err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "--from %s: %v", path, err)
	}
	return jobs, nil
}
