package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

// MetaRequeuedFrom is the meta key a requeued job carries: the id of the
// job it was first submitted as (a requeue of a requeue keeps the first).
const metaRequeuedFrom = "toolq.requeued_from"

func newDLQCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, show, requeue and purge dead letters (operator)",
		Long: `dlq works on the TOOLQ_DLQ stream: jobs that exhausted their attempts, and
jobs that waited longer than the queue-time limit for a tool no worker
served. Each dead letter is named by its stream sequence (SEQ, first column
of ls) or by its job id.

It is an operator command: the DLQ holds every tenant's dead letters and
lives in the toolq account, which tenant accounts do not reach. With
--tenant-account (or a tenant's credentials) it refuses to run.`,
	}
	cmd.AddCommand(newDLQLsCmd(g), newDLQShowCmd(g), newDLQRequeueCmd(g), newDLQPurgeCmd(g))
	return cmd
}

// dlqFilter selects dead letters.
type dlqFilter struct {
	tool, session, tenant string
	limit                 int
}

func (f *dlqFilter) register(cmd *cobra.Command, limitDefault int) {
	fs := cmd.Flags()
	fs.StringVar(&f.tool, "tool", "", "only dead letters of this tool")
	fs.StringVar(&f.session, "session", "", "only dead letters of this session")
	fs.StringVar(&f.tenant, "tenant", "", "only dead letters of this tenant (default: every tenant's)")
	fs.IntVar(&f.limit, "limit", limitDefault, "at most this many, oldest first (0: no limit)")
}

func (f *dlqFilter) check() error {
	if f.tool != "" && !contracts.ValidTool(f.tool) {
		return contracts.Errorf(contracts.CodeInvalidInput, "--tool %q is not a tool name", f.tool)
	}
	if f.session != "" && !contracts.ValidID(f.session) {
		return contracts.Errorf(contracts.CodeInvalidInput, "--session %q is not a valid id", f.session)
	}
	if f.tenant != "" && !contracts.ValidID(f.tenant) {
		return contracts.Errorf(contracts.CodeInvalidInput, "--tenant %q is not a valid id", f.tenant)
	}
	if f.limit < 0 {
		return contracts.Errorf(contracts.CodeInvalidInput, "--limit %d is negative", f.limit)
	}
	return nil
}

func (f *dlqFilter) narrowed() bool { return f.tool != "" || f.session != "" || f.tenant != "" }

func (f *dlqFilter) match(d *deadLetter) bool {
	return (f.session == "" || d.DL.Session == f.session) && (f.tenant == "" || d.DL.Tenant == f.tenant)
}

// deadLetter is one message of the DLQ stream.
type deadLetter struct {
	Seq     uint64
	Subject string
	Stored  time.Time
	DL      contracts.DeadLetter
	// bad is why the record could not be read (DL is then empty but Tool).
	bad string
}

func decodeDeadLetter(s contracts.Subjects, seq uint64, subject string, stored time.Time, data []byte) *deadLetter {
	d := &deadLetter{Seq: seq, Subject: subject, Stored: stored}
	if err := json.Unmarshal(data, &d.DL); err != nil {
		d.bad = "unreadable dead-letter record: " + err.Error()
		d.DL = contracts.DeadLetter{}
	}
	if tool, ok := strings.CutPrefix(subject, s.DLQ("")); ok && d.DL.Tool == "" {
		d.DL.Tool = tool
	}
	return d
}

// dlq is the DLQ stream of an operator's connection.
type dlq struct {
	g      *globals
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
}

// openDLQFor opens the DLQ for cmd under the command line's timeout; done
// closes it and ends the timeout.
func (g *globals) openDLQFor(cmd *cobra.Command) (context.Context, *dlq, func(), error) {
	ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
	q, err := g.openDLQ(ctx)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, q, func() { q.close(); cancel() }, nil
}

func (g *globals) openDLQ(ctx context.Context) (*dlq, error) {
	nc, js, err := g.operatorBus(ctx, "dlq")
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, g.subjects().DLQStream())
	if err != nil {
		nc.Close()
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("dlq: no stream %s: start a worker or `toolq dev` first, which create toolq's streams", g.subjects().DLQStream())
		}
		return nil, operatorErr(nc, "dlq", err)
	}
	return &dlq{g: g, nc: nc, js: js, stream: st}, nil
}

func (q *dlq) close() { q.nc.Close() }

// walk calls fn for every dead letter f selects, oldest first, until f's
// limit or fn's error. It reads through an ordered consumer (ephemeral, no
// acks): the DLQ is a limits stream, so reading takes nothing out of it.
func (q *dlq) walk(ctx context.Context, f *dlqFilter, fn func(*deadLetter) error) error {
	s := q.g.subjects()
	filter := s.DLQs()
	if f.tool != "" {
		filter = s.DLQ(f.tool)
	}
	info, err := q.stream.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return fmt.Errorf("dlq: stream info: %w", err)
	}
	var total uint64
	for _, n := range info.State.Subjects {
		total += n
	}
	if total == 0 {
		return nil
	}
	last := info.State.LastSeq // dead letters stored after the walk began are not looked at
	cons, err := q.js.OrderedConsumer(ctx, s.DLQStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter}, InactiveThreshold: time.Minute,
	})
	if err != nil {
		return fmt.Errorf("dlq: read: %w", err)
	}
	n := 0
	for {
		batch, err := cons.Fetch(256, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return fmt.Errorf("dlq: read: %w", err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("dlq: read: %w", err)
			}
			if md.Sequence.Stream > last {
				return nil
			}
			d := decodeDeadLetter(s, md.Sequence.Stream, m.Subject(), md.Timestamp, m.Data())
			if f.match(d) {
				if err := fn(d); err != nil {
					return err
				}
				if n++; f.limit > 0 && n >= f.limit {
					return nil
				}
			}
			if md.NumPending == 0 || md.Sequence.Stream == last {
				return nil
			}
		}
		if err := batch.Error(); err != nil {
			return fmt.Errorf("dlq: read: %w", err)
		}
		if got == 0 {
			return nil // the rest was deleted meanwhile
		}
	}
}

// get returns the dead letter at seq, or nil when there is none.
func (q *dlq) get(ctx context.Context, seq uint64) (*deadLetter, error) {
	raw, err := q.stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dlq: get %d: %w", seq, err)
	}
	return decodeDeadLetter(q.g.subjects(), raw.Sequence, raw.Subject, raw.Time, raw.Data), nil
}

// find resolves SEQ|JOB_ID: a number names the dead letter at that
// sequence when there is one, anything else (or a number with no dead
// letter at it) the dead letters of that job id that f selects, of which
// there must be exactly one.
func (q *dlq) find(ctx context.Context, arg string, f *dlqFilter) (*deadLetter, error) {
	if seq, err := strconv.ParseUint(arg, 10, 64); err == nil && seq > 0 {
		d, err := q.get(ctx, seq)
		if err != nil {
			return nil, err
		}
		if d != nil && (f.tool == "" || d.DL.Tool == f.tool) && f.match(d) {
			return d, nil
		}
	}
	if !contracts.ValidID(arg) {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "%q is neither a dead letter's sequence nor a job id", arg)
	}
	var found []*deadLetter
	all := *f
	all.limit = 0
	err := q.walk(ctx, &all, func(d *deadLetter) error {
		if d.DL.JobID == arg {
			found = append(found, d)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch len(found) {
	case 0:
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "no dead letter %s (neither a sequence nor a job id in %s)", arg, q.g.subjects().DLQStream())
	case 1:
		return found[0], nil
	}
	seqs := make([]string, len(found))
	for i, d := range found {
		seqs[i] = fmt.Sprintf("%d (tenant %s, session %s)", d.Seq, orDash(d.DL.Tenant), d.DL.Session)
	}
	return nil, contracts.Errorf(contracts.CodeInvalidInput, "job id %s names %d dead letters: %s; name one by its sequence, or narrow with --tenant and --session",
		arg, len(found), strings.Join(seqs, ", "))
}

// dlqRow is a dead letter as ls prints it.
type dlqRow struct {
	Seq      uint64            `json:"seq"`
	Time     time.Time         `json:"time"`
	Tool     string            `json:"tool"`
	Tenant   string            `json:"tenant,omitempty"`
	Session  string            `json:"session,omitempty"`
	JobID    string            `json:"jobId,omitempty"`
	Attempts int               `json:"attempts"`
	Error    *contracts.Error  `json:"error,omitempty"`
	Worker   string            `json:"worker,omitempty"`
	Problems map[string]string `json:"problems,omitempty"`
}

func (d *deadLetter) row() dlqRow {
	r := dlqRow{
		Seq: d.Seq, Time: d.DL.Time, Tool: d.DL.Tool, Tenant: d.DL.Tenant, Session: d.DL.Session,
		JobID: d.DL.JobID, Attempts: d.DL.Attempts, Worker: d.DL.Worker,
	}
	if r.Time.IsZero() {
		r.Time = d.Stored
	}
	if d.DL.Error != nil {
		r.Error = &contracts.Error{Code: d.DL.Error.Code, Message: d.DL.Error.Message}
	}
	if d.bad != "" {
		r.Problems = map[string]string{"record": d.bad}
	}
	return r
}

func newDLQLsCmd(g *globals) *cobra.Command {
	var f dlqFilter
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List dead letters, oldest first (--json: one JSON object a line)",
		Example: `  toolq dlq ls
  toolq dlq ls --tool code_execution --session agent-7 --limit 20
  toolq --json dlq ls --tenant ACME`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			ctx, q, done, err := g.openDLQFor(cmd)
			if err != nil {
				return err
			}
			defer done()
			var tw *tabwriter.Writer
			if !g.jsonOut {
				tw = tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "SEQ\tTIME\tTOOL\tTENANT\tSESSION\tJOB\tATTEMPTS\tERROR")
			}
			n := 0
			err = q.walk(ctx, &f, func(d *deadLetter) error {
				n++
				r := d.row()
				if g.jsonOut {
					return g.printLine(r)
				}
				msg := d.bad
				if r.Error != nil {
					msg = string(r.Error.Code) + ": " + r.Error.Message
				}
				_, err := fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Seq, r.Time.Local().Format("2006-01-02 15:04:05"),
					r.Tool, orDash(r.Tenant), orDash(r.Session), orDash(r.JobID), r.Attempts, clip(msg, 80))
				return err
			})
			if err != nil {
				return err
			}
			if tw == nil {
				return nil
			}
			if n == 0 {
				_, err = fmt.Fprintln(g.stdout, "no dead letters")
				return err
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if f.limit > 0 && n == f.limit {
				g.tell("the first %d shown; --limit 0 shows every one", n)
			}
			return nil
		},
	}
	f.register(cmd, 100)
	return cmd
}

func newDLQShowCmd(g *globals) *cobra.Command {
	var f dlqFilter
	cmd := &cobra.Command{
		Use:   "show SEQ|JOB_ID",
		Short: "Print one dead letter whole: the job as it was received and its last error",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			ctx, q, done, err := g.openDLQFor(cmd)
			if err != nil {
				return err
			}
			defer done()
			d, err := q.find(ctx, args[0], &f)
			if err != nil {
				return err
			}
			if d == nil {
				return contracts.Errorf(contracts.CodeInvalidInput, "no dead letter %s", args[0])
			}
			if g.jsonOut {
				return g.printJSON(map[string]any{"seq": d.Seq, "subject": d.Subject, "stored": d.Stored, "deadLetter": d.DL})
			}
			return printDeadLetter(g, d)
		},
	}
	f.register(cmd, 0)
	_ = cmd.Flags().MarkHidden("limit")
	return cmd
}

func printDeadLetter(g *globals, d *deadLetter) error {
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 1, ' ', 0)
	dl := &d.DL
	fmt.Fprintf(tw, "seq:\t%d\n", d.Seq)
	fmt.Fprintf(tw, "subject:\t%s\n", d.Subject)
	fmt.Fprintf(tw, "stored:\t%s\n", d.Stored.Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "tool:\t%s\n", dl.Tool)
	fmt.Fprintf(tw, "tenant:\t%s\n", orDash(dl.Tenant))
	fmt.Fprintf(tw, "session:\t%s\n", orDash(dl.Session))
	fmt.Fprintf(tw, "job:\t%s\n", orDash(dl.JobID))
	fmt.Fprintf(tw, "attempts:\t%d\n", dl.Attempts)
	fmt.Fprintf(tw, "worker:\t%s\n", orDash(dl.Worker))
	if d.bad != "" {
		fmt.Fprintf(tw, "problem:\t%s\n", d.bad)
	}
	if dl.Error != nil {
		fmt.Fprintf(tw, "error:\t%s\n", dl.Error.Code)
		fmt.Fprintf(tw, "message:\t%s\n", dl.Error.Message)
		if len(dl.Error.Details) > 0 {
			fmt.Fprintf(tw, "details:\t%s\n", dl.Error.Details)
		}
	}
	if dl.JobTruncated {
		fmt.Fprintf(tw, "truncated:\tthe job was %d bytes (sha256 %s); its first bytes follow\n", dl.JobSize, dl.JobSHA256)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(g.stdout, "job message:")
	var pretty any
	if err := json.Unmarshal(dl.Job, &pretty); err == nil {
		return g.printJSON(pretty)
	}
	_, err := fmt.Fprintf(g.stdout, "%s\n", dl.Job)
	return err
}

// requeueID is the id a dead letter's job is requeued under: the first id
// of the job (a requeue of a requeue starts again from it) with _rq<seq>,
// the dead letter's sequence. The same dead letter always gives the same
// id, two dead letters never do; an id that would be too long keeps a hash
// of its start.
func requeueID(job *contracts.Job, seq uint64) string {
	base := job.ID
	if from := job.Meta[metaRequeuedFrom]; contracts.ValidID(from) {
		base = from
	}
	suffix := "_rq" + strconv.FormatUint(seq, 10)
	if len(base)+len(suffix) > 128 {
		sum := sha256.Sum256([]byte(base))
		base = base[:128-len(suffix)-9] + "_" + hex.EncodeToString(sum[:4])
	}
	return base + suffix
}

// requeueJob is the job a dead letter is requeued as, or why it cannot be.
func requeueJob(d *deadLetter) (*contracts.Job, error) {
	dl := &d.DL
	switch {
	case d.bad != "":
		return nil, fmt.Errorf("dead letter %d: %s", d.Seq, d.bad)
	case dl.JobTruncated:
		return nil, fmt.Errorf("dead letter %d keeps only the first bytes of a %d-byte job message: nothing whole to requeue", d.Seq, dl.JobSize)
	case dl.JobID == "":
		return nil, fmt.Errorf("dead letter %d holds a message that was no readable job: nothing to requeue (purge it)", d.Seq)
	}
	job, err := contracts.DecodeJob(dl.Job)
	if err != nil {
		return nil, fmt.Errorf("dead letter %d: its job does not decode: %w", d.Seq, err)
	}
	if job.ID != dl.JobID || job.Tool != dl.Tool || job.Session != dl.Session {
		return nil, fmt.Errorf("dead letter %d: its job (%s, %s, %s) is not the one the record names (%s, %s, %s)",
			d.Seq, job.ID, job.Tool, job.Session, dl.JobID, dl.Tool, dl.Session)
	}
	if dl.Tenant != "" && !contracts.ValidID(dl.Tenant) {
		return nil, fmt.Errorf("dead letter %d names the invalid tenant %q", d.Seq, dl.Tenant)
	}
	job.Tenant = dl.Tenant
	orig := job.ID
	if from := job.Meta[metaRequeuedFrom]; contracts.ValidID(from) {
		orig = from
	}
	job.ID = requeueID(job, d.Seq)
	if _, ok := job.Meta[metaRequeuedFrom]; ok || len(job.Meta) < 32 {
		meta := make(map[string]string, len(job.Meta)+1)
		for k, v := range job.Meta {
			meta[k] = v
		}
		meta[metaRequeuedFrom] = orig
		job.Meta = meta
	}
	if err := job.Validate(); err != nil {
		return nil, fmt.Errorf("dead letter %d: the requeued job: %w", d.Seq, err)
	}
	return job, nil
}

// requeued is what requeue did with one dead letter.
type requeued struct {
	Seq        uint64 `json:"seq"`
	JobID      string `json:"jobId"`
	RequeuedAs string `json:"requeuedAs"`
	Tenant     string `json:"tenant,omitempty"`
	Session    string `json:"session"`
	Subject    string `json:"subject"`
	// Already says the job was on the bus from an earlier run of the
	// command (a duplicate publish, or its events exist): nothing was
	// enqueued this time.
	Already bool `json:"already,omitempty"`
}

// requeue republishes d's job and then deletes d. The job goes to its
// tool's subject of its tenant under requeueID, with the id as
// Nats-Msg-Id, so a rerun after a crash between the publish and the delete
// is a duplicate the server drops; past the duplicate window, a job that
// already has events is not published again.
func (q *dlq) requeue(ctx context.Context, d *deadLetter, events *bus.Events) (*requeued, error) {
	job, err := requeueJob(d)
	if err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "%v", err)
	}
	s := q.g.subjects()
	r := &requeued{Seq: d.Seq, JobID: d.DL.JobID, RequeuedAs: job.ID, Tenant: job.Tenant, Session: job.Session, Subject: s.TenantJob(job.Tenant, job.Tool)}
	ev, _, err := events.LastIn(ctx, job.Tenant, job.Session, job.ID)
	if err != nil {
		return nil, fmt.Errorf("dead letter %d: reading the events of %s: %w", d.Seq, job.ID, err)
	}
	if ev != nil {
		r.Already = true
	} else {
		data, err := json.Marshal(job)
		if err != nil {
			return nil, err
		}
		ack, err := q.js.PublishMsg(ctx, &nats.Msg{Subject: r.Subject, Data: data}, jetstream.WithMsgID(contracts.DedupID(job)))
		if err != nil {
			if errors.Is(err, jetstream.ErrNoStreamResponse) {
				hint := "is a worker or `toolq dev` running?"
				if job.Tenant != "" {
					hint = "is tenant " + job.Tenant + " still registered (toolq tenant ls)?"
				}
				return nil, fmt.Errorf("dead letter %d: no stream takes %s (%s); the dead letter is kept", d.Seq, r.Subject, hint)
			}
			return nil, fmt.Errorf("dead letter %d: publish: %w; the dead letter is kept", d.Seq, err)
		}
		r.Already = ack.Duplicate
	}
	// Only now that the bus holds the job: a crash before this line leaves
	// the dead letter, and a rerun publishes the same id again.
	if err := q.stream.DeleteMsg(ctx, d.Seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return r, fmt.Errorf("dead letter %d: requeued as %s, but not deleted: %w (a rerun will not enqueue it twice)", d.Seq, job.ID, err)
	}
	return r, nil
}

// served reports whether a worker has ever consumed tool in tenant's jobs
// stream (its durable consumer exists).
func (q *dlq) served(ctx context.Context, tenant, tool string) bool {
	s := q.g.subjects()
	stream := s.JobsStream()
	if tenant != "" {
		stream = s.TenantJobsStream(tenant)
	}
	_, err := q.js.Consumer(ctx, stream, s.ConsumerName(tool))
	return err == nil
}

func newDLQRequeueCmd(g *globals) *cobra.Command {
	var (
		f   dlqFilter
		all bool
	)
	cmd := &cobra.Command{
		Use:   "requeue SEQ|JOB_ID | --all",
		Short: "Put dead letters' jobs back on their tool's queue, then delete the dead letters",
		Long: `requeue republishes a dead letter's job to its tool's subject, in its
tenant's jobs stream when it has a tenant, and deletes the dead letter only
once the bus acknowledged the job. The job runs again from its first
attempt, under the id <job>_rq<SEQ> (meta toolq.requeued_from names the
original id): the original id already has its failed event and is still
deduplicated by the bus. Running requeue again after a crash enqueues
nothing twice: the same dead letter always gives the same id.

--all requeues every dead letter the filters select (--tool, --session,
--tenant, --limit); one that cannot be requeued (a message that was no
job, a truncated one) is reported and kept.`,
		Example: `  toolq dlq requeue 42
  toolq dlq requeue order-45 --tenant ACME
  toolq dlq requeue --all --tool code_execution`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			if all == (len(args) == 1) {
				return contracts.Errorf(contracts.CodeInvalidInput, "dlq requeue: name one dead letter (SEQ or JOB_ID) or say --all")
			}
			ctx, q, closeDLQ, err := g.openDLQFor(cmd)
			if err != nil {
				return err
			}
			defer closeDLQ()
			events, err := bus.NewEvents(ctx, q.js, g.subjects())
			if err != nil {
				return err
			}
			var targets []*deadLetter
			if all {
				err = q.walk(ctx, &f, func(d *deadLetter) error {
					targets = append(targets, d)
					return nil
				})
			} else {
				var d *deadLetter
				d, err = q.find(ctx, args[0], &f)
				targets = append(targets, d)
			}
			if err != nil {
				return err
			}
			var failed []string
			unserved := map[string]bool{}
			done := 0
			for _, d := range targets {
				r, err := q.requeue(ctx, d, events)
				if err != nil {
					if !all {
						return err
					}
					failed = append(failed, strconv.FormatUint(d.Seq, 10))
					g.logger().Warn("dead letter not requeued", "seq", d.Seq, "err", err)
					continue
				}
				done++
				key := r.Tenant + "\x00" + d.DL.Tool
				if _, seen := unserved[key]; !seen {
					unserved[key] = !q.served(ctx, r.Tenant, d.DL.Tool)
					if unserved[key] {
						g.tell("warning: no worker has served %s (tenant %s) yet: the job waits for one (or for the queue-time limit)", d.DL.Tool, orDash(r.Tenant))
					}
				}
				if g.jsonOut {
					if err := g.printLine(r); err != nil {
						return err
					}
					continue
				}
				note := ""
				if r.Already {
					note = " (already on the bus from an earlier requeue)"
				}
				fmt.Fprintf(g.stdout, "requeued %d: job %s as %s on %s%s\n", r.Seq, r.JobID, r.RequeuedAs, r.Subject, note)
			}
			if all && !g.jsonOut && done == 0 && len(failed) == 0 {
				fmt.Fprintln(g.stdout, "no dead letters to requeue")
			}
			if len(failed) > 0 {
				return fmt.Errorf("dlq requeue: %d dead letters not requeued and kept (seq %s); %d requeued", len(failed), strings.Join(failed, ", "), done)
			}
			return nil
		},
	}
	f.register(cmd, 0)
	cmd.Flags().BoolVar(&all, "all", false, "requeue every dead letter the filters select")
	return cmd
}

func newDLQPurgeCmd(g *globals) *cobra.Command {
	var (
		f        dlqFilter
		all, yes bool
	)
	cmd := &cobra.Command{
		Use:   "purge [SEQ|JOB_ID] [--tool T] [--session S] [--tenant T] | --all",
		Short: "Delete dead letters: one, those the filters select, or --all; asks first unless --yes",
		Example: `  toolq dlq purge 42 --yes
  toolq dlq purge --tool sleep --session agent-7
  toolq dlq purge --all --yes`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			if !all && len(args) == 0 && !f.narrowed() {
				return contracts.Errorf(contracts.CodeInvalidInput, "dlq purge: name a dead letter, narrow with --tool, --session or --tenant, or say --all")
			}
			if all && (len(args) > 0 || f.narrowed()) {
				return contracts.Errorf(contracts.CodeInvalidInput, "dlq purge: --all deletes every dead letter: not with a dead letter or filters")
			}
			ctx, q, done, err := g.openDLQFor(cmd)
			if err != nil {
				return err
			}
			defer done()
			// Exactly the dead letters counted and confirmed are deleted;
			// one that arrives meanwhile stays.
			var seqs []uint64
			if len(args) == 1 {
				d, err := q.find(ctx, args[0], &f)
				if err != nil {
					return err
				}
				seqs = append(seqs, d.Seq)
			} else if err := q.walk(ctx, &f, func(d *deadLetter) error {
				seqs = append(seqs, d.Seq)
				return nil
			}); err != nil {
				return err
			}
			if len(seqs) == 0 {
				if g.jsonOut {
					return g.printJSON(map[string]any{"purged": 0})
				}
				_, err := fmt.Fprintln(g.stdout, "no dead letters to purge")
				return err
			}
			if err := askYes(cmd, g, yes, fmt.Sprintf("Delete %d dead letters (seq %d … %d)?", len(seqs), seqs[0], seqs[len(seqs)-1])); err != nil {
				return err
			}
			purged := 0
			if all && f.limit == 0 {
				// Up to the last one counted, in one request: every dead
				// letter below it was counted.
				if err := q.purgeUpTo(ctx, seqs[len(seqs)-1]+1); err != nil {
					return err
				}
				purged = len(seqs)
			} else {
				for _, seq := range seqs {
					err := q.stream.DeleteMsg(ctx, seq)
					if errors.Is(err, jetstream.ErrMsgNotFound) {
						continue // gone meanwhile (aged out, another purge)
					}
					if err != nil {
						return fmt.Errorf("dlq purge: delete %d: %w (%d deleted)", seq, err, purged)
					}
					purged++
				}
			}
			if g.jsonOut {
				return g.printJSON(map[string]any{"purged": purged})
			}
			_, err = fmt.Fprintf(g.stdout, "purged %d dead letters\n", purged)
			return err
		},
	}
	f.register(cmd, 0)
	cmd.Flags().BoolVar(&all, "all", false, "delete every dead letter")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

// purgeUpTo deletes every dead letter below seq.
func (q *dlq) purgeUpTo(ctx context.Context, seq uint64) error {
	if err := q.stream.Purge(ctx, jetstream.WithPurgeSequence(seq)); err != nil {
		return fmt.Errorf("dlq purge: %w", err)
	}
	return nil
}
