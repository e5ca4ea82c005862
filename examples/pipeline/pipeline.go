// Command pipeline is a batch pipeline on toolq: it submits N analyses as
// code-mode runs with producer.SubmitBatch, shows its progress, collects
// every result by following the session's events, and survives being
// killed halfway: run it again with the same --batch and it submits
// nothing twice and collects everything.
//
//	toolq dev &
//	go run ./examples/pipeline --nats nats://127.0.0.1:4222 --inputs 10000
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/errgroup"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/producer"
)

// Config of one pipeline run.
type Config struct {
	// NATS is the server's URL.
	NATS string
	// Inputs is how many analyses the batch has.
	Inputs int
	// Batch names the batch: job ids are <Batch>-<index>, so every run of
	// the same batch submits the same ids.
	Batch string
	// Session is the session of every job (the pipeline's own).
	Session string
	// StateFile keeps how many inputs, in order, the bus has acknowledged.
	StateFile string
	// Window is how many publishes wait for their acknowledgement at once.
	Window int
	// Progress, when set, hears the counts every 5% (and at the end).
	Progress func(Progress)
	// Log receives the run's messages; io.Discard when nil.
	Log io.Writer
}

// Progress is where a run stands.
type Progress struct {
	Total, Submitted, Skipped, Done int
}

// Result is one input's outcome, read from its job's terminal event.
type Result struct {
	Index  int              `json:"index"`
	JobID  string           `json:"jobId"`
	Status contracts.Status `json:"status"`
	Value  json.RawMessage  `json:"value,omitempty"`
	Error  string           `json:"error,omitempty"`
}

// Summary is what a run did.
type Summary struct {
	// Skipped inputs were acknowledged by an earlier run (the state file)
	// or had already ended; Submitted were taken by the bus now;
	// Duplicates it held already (within its duplicate window).
	Skipped, Submitted, Duplicates, Failed int
	// Results has one entry per input, by index.
	Results []Result
}

// analysisCode is the guest code of input i: the statistics of a data
// set derived from i. The run may call no tool (tools: []).
func analysisCode(i int) string {
	return fmt.Sprintf(`const seed = %d;
let x = seed %% 2147483646 + 1;
const data = [];
for (let k = 0; k < 64; k++) { x = (x * 48271) %% 2147483647; data.push(x %% 1000); }
const sum = data.reduce((a, b) => a + b, 0);
return {input: seed, n: data.length, sum, mean: sum / data.length, max: Math.max(...data), min: Math.min(...data)};`, i)
}

// JobID is the id of input i's job in batch.
func JobID(batch string, i int) string { return fmt.Sprintf("%s-%06d", batch, i) }

// Run runs the pipeline until every input has a result or ctx ends. A run
// that ended early (ctx, a crash, a kill) is taken up by running it
// again with the same Config.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	if cfg.Inputs <= 0 || !contracts.ValidID(cfg.Batch) || !contracts.ValidID(cfg.Session) {
		return nil, errors.New("pipeline: want inputs > 0 and valid batch and session names")
	}
	logw := cfg.Log
	if logw == nil {
		logw = io.Discard
	}
	nc, err := nats.Connect(cfg.NATS, nats.Name("toolq example pipeline"))
	if err != nil {
		return nil, fmt.Errorf("pipeline: connect: %w", err)
	}
	defer nc.Close()
	p, err := producer.New(nc, &producer.Config{Session: cfg.Session})
	if err != nil {
		return nil, err
	}
	defer p.Close()

	st := newTracker(cfg)
	// 1. What an earlier run left: the inputs acknowledged in order (the
	// state file) and every job that already ended (its terminal event
	// is in the events stream, which is also toolq's result store).
	acked := readState(cfg.StateFile)
	if err := p.ReadEvents(ctx, cfg.Session, nil, func(ev *contracts.Event) error {
		st.record(ev)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("pipeline: read the session's events: %w", err)
	}
	if acked > 0 || st.doneCount() > 0 {
		fmt.Fprintf(logw, "pipeline: taking up batch %s: %d inputs acknowledged before, %d already done\n", cfg.Batch, acked, st.doneCount())
	}

	g, gctx := errgroup.WithContext(ctx)
	// 2. The collector follows the session from its first event, so it
	// sees both what ended before and what ends from now on; it stops
	// once every input has its result.
	g.Go(func() error {
		if st.complete() {
			return nil
		}
		return p.ReadEvents(gctx, cfg.Session, &producer.ReadOpts{Follow: true}, func(ev *contracts.Event) error {
			if st.record(ev) && st.complete() {
				return producer.ErrStop
			}
			return nil
		})
	})
	// 3. Submit what is neither acknowledged before nor ended.
	var (
		jobs    []*contracts.Job
		index   []int
		skipped int
	)
	for i := range cfg.Inputs {
		if i < acked || st.has(i) {
			skipped++
			continue
		}
		in, err := json.Marshal(contracts.CodeModeExecInput{Code: analysisCode(i), Tools: []string{}})
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, &contracts.Job{ID: JobID(cfg.Batch, i), Tool: contracts.ToolCodeModeExec, Session: cfg.Session, Input: in})
		index = append(index, i)
	}
	st.answered(skipped, true)
	sum := &Summary{Skipped: skipped}
	g.Go(func() error {
		if len(jobs) == 0 {
			return nil
		}
		// The state file moves on only over an unbroken run of
		// acknowledged inputs: a rerun starts after them.
		saved, ok := acked, true
		res, err := p.SubmitBatch(gctx, jobs, &producer.BatchOpts{Window: cfg.Window, OnAck: func(k int, _ *contracts.Job, err error) {
			st.answered(1, false)
			if err != nil && !errors.Is(err, producer.ErrDuplicate) {
				fmt.Fprintf(logw, "pipeline: input %d refused: %v\n", index[k], err)
				ok = false
			}
			if ok {
				acked = index[k] + 1
				if acked-saved >= 100 {
					writeState(cfg.StateFile, acked)
					saved = acked
				}
			}
		}})
		writeState(cfg.StateFile, acked)
		if res != nil {
			sum.Submitted, sum.Duplicates, sum.Failed = res.Submitted, res.Duplicates, res.Failed
		}
		if err != nil {
			return fmt.Errorf("pipeline: submit: %w", err)
		}
		if res.Failed > 0 {
			return fmt.Errorf("pipeline: %d inputs were refused", res.Failed)
		}
		return nil
	})
	err = g.Wait()
	sum.Results = st.results()
	st.report(true)
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return sum, err
}

// tracker holds the results by input and the counts.
type tracker struct {
	cfg    Config
	prefix string

	mu        sync.Mutex
	done      map[int]Result
	submitted int
	skipped   int
	lastStep  int
}

func newTracker(cfg Config) *tracker {
	return &tracker{cfg: cfg, prefix: cfg.Batch + "-", done: map[int]Result{}, lastStep: -1}
}

// record keeps ev's result if it ends a job of the batch not seen ended
// before; it reports whether it did.
func (t *tracker) record(ev *contracts.Event) bool {
	d := ev.Data
	if !d.Status.Terminal() || d.Parent != nil {
		return false
	}
	rest, ok := strings.CutPrefix(d.JobID, t.prefix)
	if !ok {
		return false
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || i >= t.cfg.Inputs || JobID(t.cfg.Batch, i) != d.JobID {
		return false
	}
	r := Result{Index: i, JobID: d.JobID, Status: d.Status}
	if res, err := producer.CodeModeResult(ev); err == nil {
		r.Value = res.Value
		if e := res.Err(); e != nil {
			r.Error = e.Error()
		}
	}
	if d.Error != nil && r.Error == "" {
		r.Error = d.Error.Error()
	}
	t.mu.Lock()
	_, seen := t.done[i]
	if !seen {
		t.done[i] = r
	}
	t.mu.Unlock()
	if !seen {
		t.report(false)
	}
	return !seen
}

func (t *tracker) has(i int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.done[i]
	return ok
}

func (t *tracker) doneCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.done)
}

func (t *tracker) complete() bool { return t.doneCount() == t.cfg.Inputs }

// answered counts n more inputs answered by the bus (skipped: taken
// care of before).
func (t *tracker) answered(n int, skipped bool) {
	t.mu.Lock()
	if skipped {
		t.skipped += n
	} else {
		t.submitted += n
	}
	t.mu.Unlock()
	t.report(false)
}

// report tells Progress at every 5% of the inputs submitted or done, and
// at the end.
func (t *tracker) report(final bool) {
	if t.cfg.Progress == nil {
		return
	}
	t.mu.Lock()
	pr := Progress{Total: t.cfg.Inputs, Submitted: t.submitted, Skipped: t.skipped, Done: len(t.done)}
	step := max(t.cfg.Inputs/20, 1)
	s := (pr.Submitted+pr.Skipped)/step + pr.Done/step
	tell := final || s != t.lastStep
	t.lastStep = s
	t.mu.Unlock()
	if tell {
		t.cfg.Progress(pr)
	}
}

func (t *tracker) results() []Result {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Result, 0, len(t.done))
	for _, r := range t.done {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Result) int { return a.Index - b.Index })
	return out
}

// readState returns the acknowledged count of the state file (0 when
// there is none).
func readState(path string) int {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the file the user named
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// writeState replaces the state file, through a rename so a kill leaves
// either the old count or the new one.
func writeState(path string, acked int) {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(acked)+"\n"), 0o600); err == nil {
		_ = os.Rename(tmp, path)
	}
}

func main() {
	cfg := Config{Log: os.Stderr}
	var out string
	flag.StringVar(&cfg.NATS, "nats", envOr("TOOLQ_NATS", nats.DefaultURL), "NATS server URL (env TOOLQ_NATS)")
	flag.IntVar(&cfg.Inputs, "inputs", 10_000, "how many analyses to run")
	flag.StringVar(&cfg.Batch, "batch", "pipeline", "batch name: job ids are <batch>-<index>; rerun with the same name to take a batch up")
	flag.StringVar(&cfg.Session, "session", "pipeline", "session of the batch's jobs")
	flag.StringVar(&cfg.StateFile, "state", "", "state file (default <batch>.state)")
	flag.IntVar(&cfg.Window, "window", producer.DefaultBatchWindow, "publishes awaiting their acknowledgement at once")
	flag.StringVar(&out, "out", "", "write the results as JSON Lines to this file (default <batch>.results.jsonl)")
	flag.Parse()
	if cfg.StateFile == "" {
		cfg.StateFile = cfg.Batch + ".state"
	}
	if out == "" {
		out = cfg.Batch + ".results.jsonl"
	}
	start := time.Now()
	cfg.Progress = func(p Progress) {
		fmt.Fprintf(os.Stderr, "pipeline: %6.1fs  submitted %d (+%d before)  done %d of %d\n",
			time.Since(start).Seconds(), p.Submitted, p.Skipped, p.Done, p.Total)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := Run(ctx, cfg)
	if sum != nil {
		if werr := writeResults(out, sum.Results); werr != nil {
			fmt.Fprintln(os.Stderr, "pipeline:", werr)
		}
		failed := 0
		for _, r := range sum.Results {
			if r.Status != contracts.StatusCompleted {
				failed++
			}
		}
		fmt.Printf("%d inputs: %d results (%d not completed) in %s; this run submitted %d, %d were on the bus already, %d skipped; results in %s\n",
			cfg.Inputs, len(sum.Results), failed, time.Since(start).Round(time.Millisecond), sum.Submitted, sum.Duplicates, sum.Skipped, out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pipeline:", err, "(run again with the same --batch to take it up)")
		os.Exit(1)
	}
}

func writeResults(path string, rs []Result) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	f, err := os.Create(path) //nolint:gosec // G304: the file the user named
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for i := range rs {
		if err := enc.Encode(&rs[i]); err != nil {
			_ = f.Close()
			return err
		}
	}
	return f.Close()
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
