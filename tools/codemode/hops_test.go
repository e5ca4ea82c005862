package codemode_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// hopTracer records, from a core subscription on every subject, when each
// message of a benchmark's runs crossed the server, so a benchmark can print
// where a round trip's time goes hop by hop. Runs are timed one at a time:
// every message between a run's start and its end is that run's.
type hopTracer struct {
	mu    sync.Mutex
	start time.Time
	seen  []hop
	runs  [][]hop
	done  chan struct{} // closed when the run's completed event is seen
	runID string
	sub   func() // subscribes; on() calls it
	live  bool
}

type hop struct {
	at   time.Duration
	what string
	ids  string // subject and message id: which run a message is of
}

func traceHops(b *testing.B, url string) *hopTracer {
	b.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	h := &hopTracer{}
	h.sub = func() {
		if _, err := nc.Subscribe(">", h.record); err != nil {
			b.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	return h
}

// on starts tracing: until then begin and end cost nothing.
func (h *hopTracer) on() {
	h.sub()
	h.live = true
}

// record notes one message crossing the server.
func (h *hopTracer) record(m *nats.Msg) {
	now := time.Now()
	what := hopName(m)
	if what == "" {
		return
	}
	if strings.HasPrefix(m.Reply, "$JS.ACK.") {
		// A consumer's delivery of a stored message, not its publish.
		what = "delivered: " + what
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.start.IsZero() {
		return
	}
	ids := m.Subject + " " + m.Header.Get(nats.MsgIdHdr)
	h.seen = append(h.seen, hop{at: now.Sub(h.start), what: what, ids: ids})
	if what == "event code_mode.exec completed" && h.runID != "" && strings.Contains(ids, h.runID) && h.done != nil {
		close(h.done)
		h.done = nil
	}
}

// begin starts a run's window.
func (h *hopTracer) begin() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.start, h.seen, h.runID, h.done = time.Now(), nil, "", make(chan struct{})
}

// end closes the window of run runID once the tracer has seen its
// completed event, keeping the messages that name the run (its jobs,
// events, record) and those that name none (acks, API requests); another
// run's messages are left out.
func (h *hopTracer) end(runID string) {
	if !h.live {
		return
	}
	h.mu.Lock()
	h.runID = runID
	done := h.done
	for _, x := range h.seen {
		if x.what == "event code_mode.exec completed" && strings.Contains(x.ids, runID) && done != nil {
			close(done)
			h.done = nil
			break
		}
	}
	h.mu.Unlock()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var mine []hop
	for _, x := range h.seen {
		if strings.Contains(x.ids, runID) || !namesRun(x) {
			mine = append(mine, x)
		}
	}
	h.runs = append(h.runs, mine)
	h.start, h.seen, h.runID = time.Time{}, nil, ""
}

// namesRun reports whether a message names a run at all.
func namesRun(x hop) bool {
	return !strings.HasPrefix(x.what, "ack") && !strings.HasPrefix(x.what, "api ")
}

// hopName names a message by what it does for a run; "" leaves it out
// (replies, heartbeats, the tracer's own traffic).
func hopName(m *nats.Msg) string {
	s := m.Subject
	switch {
	case strings.HasPrefix(s, "_INBOX."), strings.HasPrefix(s, "$JS.EVENT."), strings.HasPrefix(s, "$SYS."):
		return ""
	case strings.HasPrefix(s, "toolq.jobs."):
		return "job " + jobTool(strings.TrimPrefix(s, "toolq.jobs."))
	case strings.HasPrefix(s, "toolq.events."):
		var ev struct {
			Data struct {
				Tool   string `json:"tool"`
				Status string `json:"status"`
			} `json:"data"`
		}
		_ = json.Unmarshal(m.Data, &ev)
		return "event " + ev.Data.Tool + " " + ev.Data.Status
	case strings.HasPrefix(s, "$KV."):
		bucket, _, _ := strings.Cut(strings.TrimPrefix(s, "$KV."), ".")
		if m.Header.Get("KV-Operation") != "" {
			return "kv " + bucket + " " + strings.ToLower(m.Header.Get("KV-Operation"))
		}
		return "kv " + bucket + " put"
	case strings.HasPrefix(s, "$JS.ACK."):
		// $JS.ACK.<stream>.<consumer>.…: whose ack it is.
		parts := strings.Split(strings.TrimPrefix(s, "$JS.ACK."), ".")
		if len(parts) >= 2 {
			return "ack " + parts[0] + " " + parts[1]
		}
		return "ack"
	case strings.HasPrefix(s, "$JS.API.DIRECT.GET."):
		stream, _, _ := strings.Cut(strings.TrimPrefix(s, "$JS.API.DIRECT.GET."), ".")
		return "direct get " + stream
	case strings.HasPrefix(s, "$JS.API."):
		// STREAM.INFO.X, CONSUMER.CREATE.X.Y: the verb and the stream.
		parts := strings.Split(strings.TrimPrefix(s, "$JS.API."), ".")
		if len(parts) >= 4 && parts[0] == "CONSUMER" && parts[1] == "MSG" {
			// CONSUMER.MSG.NEXT.<stream>.<consumer>: whose pull it is.
			return "api " + strings.Join(parts[:3], ".") + " " + strings.Join(parts[3:], " ")
		}
		if len(parts) >= 3 {
			return "api " + parts[0] + "." + parts[1] + " " + parts[2]
		}
		return "api " + strings.Join(parts, ".")
	}
	return "other " + s
}

// jobTool is the tool of a job subject's tail (after "toolq.jobs."), with
// the priority level and session lane tokens left out: every run's jobs
// are the same hops whatever lane its session hashes to.
func jobTool(tail string) string {
	for {
		head, rest, ok := strings.Cut(tail, ".")
		if !ok || !strings.HasPrefix(head, "~") {
			return tail
		}
		tail = rest
	}
}

// report logs each hop's median time into the run and how often it
// happens per run, in the order hops happen.
func (h *hopTracer) report(b *testing.B) {
	b.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.runs) == 0 {
		return
	}

	// The k-th occurrence of a hop in a run is a hop of its own ("kv
	// toolq_runs put #2"): the same message kind at two steps of a run.
	at := map[string][]time.Duration{}
	for _, run := range h.runs {
		n := map[string]int{}
		for _, x := range run {
			n[x.what]++
			key := x.what
			if n[x.what] > 1 {
				key = fmt.Sprintf("%s #%d", x.what, n[x.what])
			}
			at[key] = append(at[key], x.at)
		}
	}
	type row struct {
		what   string
		median time.Duration
		share  float64
	}
	rows := make([]row, 0, len(at))
	for what, ts := range at {
		slices.Sort(ts)
		rows = append(rows, row{what: what, median: ts[len(ts)/2], share: float64(len(ts)) / float64(len(h.runs))})
	}
	slices.SortFunc(rows, func(a, b row) int { return int(a.median - b.median) })
	var sb strings.Builder
	fmt.Fprintf(&sb, "per-hop breakdown over %d runs (median ms since submit, share of runs with the hop):\n", len(h.runs))
	for _, r := range rows {
		if r.share < 0.2 {
			continue // another run's tail, or rare
		}
		fmt.Fprintf(&sb, "  %7.2f  %4.2f  %s\n", float64(r.median.Microseconds())/1000, r.share, r.what)
	}
	// Printed, not logged: a benchmark's log is cut to a few lines.
	fmt.Print(sb.String())
	h.reportLegs(b)
}

// legs are the named parts of a round trip, in order: each runs from the
// message that ended the leg before (the first: from the exec job's publish)
// to the first message named "to" after it. What the run does in between
// (a handler's work) is in the leg.
var legs = []struct{ name, to, what string }{
	{"exec-delivery", "delivered: job code_mode.exec", "the exec job, submit to delivery"},
	{"exec-to-record", "kv toolq_runs put", "the exec slice (guest, snapshot) to the record write (snapshot inline)"},
	{"nested-submit", "job noop", "record write acknowledged to the nested job's publish"},
	{"nested-delivery", "delivered: job noop", "the nested job, publish to delivery"},
	{"nested-run", "event noop completed", "the nested job run to its completed event"},
	{"result-submit", "job code_mode.result", "completed event acknowledged to the result job's publish"},
	{"result-delivery", "delivered: job code_mode.result", "the result job, publish to delivery"},
	{"result-to-lease", "kv toolq_runs put", "record read and result recorded with the lease (CAS write)"},
	{"lease-to-completed", "event code_mode.exec completed", "resume (snapshot decode, guest) and the completed event"},
	{"completed-delivery", "delivered: event code_mode.exec completed", "the completed event to the requester"},
}

// reportLegs reports each leg's median over the traced runs, in ms, as a
// benchmark metric, and prints them with the share of runs that had them.
func (h *hopTracer) reportLegs(b *testing.B) {
	b.Helper()
	ds := make([][]time.Duration, len(legs))
	for _, run := range h.runs {
		at, ok := firstAfter(run, "job code_mode.exec", 0)
		for i, l := range legs {
			if !ok {
				break
			}
			var end time.Duration
			if end, ok = firstAfter(run, l.to, at); ok {
				ds[i] = append(ds[i], end-at)
				at = end
			}
		}
	}
	// The round trips a run makes on the records and events besides the
	// legs' own messages, per run (mean): record writes (every one a CAS),
	// record reads, and reads of a job's last event (the requester's await
	// makes one).
	counts := []struct{ name, what string }{
		{"record_writes/run", "kv toolq_runs put"},
		{"record_reads/run", "direct get KV_toolq_runs"},
		{"event_reads/run", "direct get TOOLQ_EVENTS"},
	}
	for _, c := range counts {
		n := 0
		for _, run := range h.runs {
			for _, x := range run {
				if x.what == c.what {
					n++
				}
			}
		}
		b.ReportMetric(float64(n)/float64(len(h.runs)), c.name)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "round trip by leg over %d runs (median ms, share of runs):\n", len(h.runs))
	for i, l := range legs {
		if len(ds[i]) == 0 {
			continue
		}
		slices.Sort(ds[i])
		med := float64(ds[i][len(ds[i])/2].Microseconds()) / 1000
		b.ReportMetric(med, l.name+"_ms")
		fmt.Fprintf(&sb, "  %7.2f  %4.2f  %-18s %s\n", med, float64(len(ds[i]))/float64(len(h.runs)), l.name, l.what)
	}
	fmt.Print(sb.String())
}

// firstAfter is the time of the first message named what at or after t.
func firstAfter(run []hop, what string, t time.Duration) (time.Duration, bool) {
	for _, x := range run {
		if x.what == what && x.at >= t {
			return x.at, true
		}
	}
	return 0, false
}
