package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolq/toolq/cmd/toolq/internal/operator"
	"github.com/toolq/toolq/contracts"
)

// maxJobRows bounds the jobs page's table.
const maxJobRows = 300

// jobRow is one job as its newest event in the window shows it.
type jobRow struct {
	Tenant, Session, JobID, Tool string
	Status                       contracts.Status
	First, Last                  time.Time
	Events                       int
	Error                        *contracts.Error
}

// jobsData is the jobs page.
type jobsData struct {
	Jobs   []jobRow
	Queues []operator.QueueRow
	// Window is how many of the newest events were read; Cut says the
	// table shows only the newest maxJobRows jobs.
	Window int
	Cut    bool
}

// eventFilters are the subjects of the events f selects.
func (s *Server) eventFilters(f filter) []string {
	sub := s.cfg.Subjects
	session := f.Session
	if session == "" {
		session = "*"
	}
	switch f.Tenant {
	case "":
		if f.Session == "" {
			return []string{sub.Events(), sub.TenantEvents()}
		}
		return []string{sub.Event(session, "*"), sub.TenantEvent("*", session, "*")}
	case defaultTenant:
		return []string{sub.Event(session, "*")}
	}
	return []string{sub.TenantEvent(f.Tenant, session, "*")}
}

// readEvents reads the events stream on the subjects, oldest first,
// only its newest window messages when window > 0 (operator.Read: nothing
// is taken out of it). fn gets each event with its tenant, taken from the
// subject.
func (s *Server) readEvents(ctx context.Context, subjects []string, window int, fn func(tenant string, ev *contracts.Event)) error {
	st, err := s.js.Stream(ctx, s.cfg.Subjects.EventsStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil // no worker made toolq's streams yet: no events
	}
	if err != nil {
		return fmt.Errorf("events stream: %w", err)
	}
	return operator.Read(ctx, st, subjects, &operator.ReadOpts{Newest: uint64(max(window, 0))}, func(m jetstream.Msg, _ *jetstream.MsgMetadata) error { //nolint:gosec // G115: not negative
		var ev contracts.Event
		if tenant, ok := s.cfg.Subjects.TenantOf(m.Subject()); ok && json.Unmarshal(m.Data(), &ev) == nil && contracts.ValidID(ev.Data.JobID) {
			fn(tenant, &ev)
		}
		return nil
	})
}

// recentJobs is the jobs of the newest events window that f selects,
// newest change first.
func (s *Server) recentJobs(ctx context.Context, f filter) ([]jobRow, bool, error) {
	rows := map[string]*jobRow{}
	err := s.readEvents(ctx, s.eventFilters(f), s.cfg.EventsWindow, func(tenant string, ev *contracts.Event) {
		d := &ev.Data
		key := tenant + "\x00" + d.Session + "\x00" + d.JobID
		r, ok := rows[key]
		if !ok {
			r = &jobRow{Tenant: tenant, Session: d.Session, JobID: d.JobID, Tool: d.Tool, First: ev.Time}
			rows[key] = r
		}
		r.Events++
		r.Last, r.Error = ev.Time, d.Error
		if d.Status != contracts.StatusProgress || r.Status == "" {
			r.Status = d.Status
		}
	})
	if err != nil {
		return nil, false, err
	}
	out := make([]jobRow, 0, len(rows))
	for _, r := range rows {
		if (f.Tool == "" || r.Tool == f.Tool) && (f.Status == "" || string(r.Status) == f.Status) {
			out = append(out, *r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Last.After(out[j].Last) })
	cut := len(out) > maxJobRows
	if cut {
		out = out[:maxJobRows]
	}
	return out, cut, nil
}

func (s *Server) handleJobs(w http.ResponseWriter, r *http.Request) {
	p := &page{Title: "Jobs"}
	f, err := parseFilter(r)
	if err != nil {
		s.fail(w, r, "jobs", p, err)
		return
	}
	p.Filter, p.Live = f, filter{Tenant: f.Tenant, Tool: f.Tool, Session: f.Session}.liveURL("kind", "job")
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	p.Tenants = s.tenants(ctx)
	d := &jobsData{Window: s.cfg.EventsWindow}
	p.Data = d
	if d.Jobs, d.Cut, err = s.recentJobs(ctx, f); err != nil {
		s.fail(w, r, "jobs", p, err)
		return
	}
	qtenant := f.Tenant
	if qtenant == defaultTenant {
		qtenant = ""
	}
	queues, _, err := operator.ListQueues(ctx, s.js, s.cfg.Subjects, qtenant, f.Tool)
	if err != nil && !errors.Is(err, context.Canceled) {
		p.Error = "queues: " + err.Error()
	}
	for _, q := range queues {
		if f.tenantMatch(q.Tenant) {
			d.Queues = append(d.Queues, q)
		}
	}
	s.render(w, r, "jobs", p)
}

// jobData is one job's page: its events, oldest first.
type jobData struct {
	Tenant, Session, JobID, Tool string
	Events                       []*contracts.Event
	Last                         *contracts.Event
}

func (s *Server) handleJob(w http.ResponseWriter, r *http.Request) {
	p := &page{Title: "Job", Nav: "jobs"}
	q := r.URL.Query()
	tenant, session, id := q.Get("tenant"), q.Get("session"), q.Get("id")
	if (tenant != "" && !contracts.ValidID(tenant)) || !contracts.ValidID(session) || !contracts.ValidID(id) {
		s.fail(w, r, "job", p, contracts.Errorf(contracts.CodeInvalidInput, "a job is named by its tenant, session and id"))
		return
	}
	lt := tenant
	if lt == "" {
		lt = defaultTenant
	}
	p.Live = filter{Tenant: lt, Session: session}.liveURL("kind", "job", "job", id)
	d := &jobData{Tenant: tenant, Session: session, JobID: id}
	p.Data = d
	p.Title = "Job " + id
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	err := s.readEvents(ctx, []string{s.cfg.Subjects.TenantEvent(tenant, session, id)}, 0, func(_ string, ev *contracts.Event) {
		d.Events = append(d.Events, ev)
	})
	if err != nil {
		s.fail(w, r, "job", p, err)
		return
	}
	if n := len(d.Events); n > 0 {
		d.Last = d.Events[n-1]
		d.Tool = d.Last.Data.Tool
	}
	s.render(w, r, "job", p)
}

// tenants lists the tenants with a jobs stream, for the filter.
func (s *Server) tenants(ctx context.Context) []string {
	streams, err := operator.Streams(ctx, s.js, s.cfg.Subjects)
	if err != nil {
		return nil
	}
	var out []string
	for _, st := range streams {
		if st.Tenant != "" {
			out = append(out, st.Tenant)
		}
	}
	return out
}
