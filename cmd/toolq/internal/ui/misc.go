package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/toolq/toolq/cmd/toolq/internal/operator"
	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/scheduler"
	"github.com/toolq/toolq/tools/codemode"
)

func (s *Server) handleRuns(w http.ResponseWriter, r *http.Request) {
	p := &page{Title: "Code-mode runs"}
	f, err := parseFilter(r)
	if err != nil {
		s.fail(w, r, "runs", p, err)
		return
	}
	p.Filter = f
	p.Live = filter{Tenant: f.Tenant, Session: f.Session}.liveURL("kind", "job")
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	p.Tenants = s.tenants(ctx)
	// ListRuns narrows by session for the default tenant only; the
	// console narrows the rest itself.
	all, err := codemode.ListRuns(ctx, s.js, s.cfg.Subjects, "")
	if err != nil {
		s.fail(w, r, "runs", p, err)
		return
	}
	var runs []codemode.RunInfo
	for _, run := range all {
		if f.tenantMatch(run.Tenant) && (f.Session == "" || run.Session == f.Session) && (f.Status == "" || run.Status == f.Status) {
			runs = append(runs, run)
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].Suspended.After(runs[j].Suspended) })
	p.Data = runs
	s.render(w, r, "runs", p)
}

// breakerRow is one worker's breaker of one provider and model.
type breakerRow struct {
	Provider, Worker string
	contracts.BreakerModel
	Updated time.Time
}

// handleBreakers shows every breaker of every live worker, from the
// breakers bucket the workers keep (operator.BreakerBoard): open ones
// first. The live feed of breaker changes reloads it.
func (s *Server) handleBreakers(w http.ResponseWriter, r *http.Request) {
	p := &page{Title: "Breakers", Live: filter{}.liveURL("kind", "breaker")}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	recs, err := operator.ReadBreakers(ctx, s.js, s.cfg.Subjects)
	var rows []breakerRow
	for _, rec := range recs {
		for _, m := range rec.Breakers {
			rows = append(rows, breakerRow{Provider: rec.Provider, Worker: rec.Worker, BreakerModel: m, Updated: rec.Updated})
		}
	}
	rank := map[string]int{contracts.BreakerOpen: 0, contracts.BreakerHalfOpen: 1}
	sort.SliceStable(rows, func(i, j int) bool {
		ri, oki := rank[rows[i].State]
		rj, okj := rank[rows[j].State]
		if !oki {
			ri = 2
		}
		if !okj {
			rj = 2
		}
		return ri < rj
	})
	p.Data = rows
	if err != nil {
		s.fail(w, r, "breakers", p, err)
		return
	}
	s.render(w, r, "breakers", p)
}

func (s *Server) handleSchedules(w http.ResponseWriter, r *http.Request) {
	p := &page{Title: "Schedules"}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	list, err := s.sched.List(ctx)
	p.Data = list
	if err != nil {
		s.fail(w, r, "schedules", p, err)
		return
	}
	s.render(w, r, "schedules", p)
}

// handleScheduleAdd adds a schedule, as `toolq schedule add`.
func (s *Server) handleScheduleAdd(w http.ResponseWriter, r *http.Request) {
	p := &page{Title: "Schedules", Nav: "schedules"}
	bad := func(format string, args ...any) {
		s.fail(w, r, "schedules", p, contracts.Errorf(contracts.CodeInvalidInput, format, args...))
	}
	sc := scheduler.Schedule{
		ID: strings.TrimSpace(r.PostFormValue("id")),
		Job: scheduler.Job{
			Tool: strings.TrimSpace(r.PostFormValue("tool")), Session: strings.TrimSpace(r.PostFormValue("session")),
		},
	}
	if in := strings.TrimSpace(r.PostFormValue("input")); in != "" {
		if !json.Valid([]byte(in)) {
			bad("the input is not valid JSON")
			return
		}
		sc.Job.Input = json.RawMessage(in)
	}
	spec := strings.TrimSpace(r.PostFormValue("spec"))
	switch kind := r.PostFormValue("kind"); kind {
	case "every", "in":
		d, err := time.ParseDuration(spec)
		if err != nil {
			bad("%s %q: want a duration like 30s or 1h", kind, spec)
			return
		}
		if kind == "every" {
			sc.Every = d
		} else {
			sc.In = d
		}
	case "at":
		t, err := time.Parse(time.RFC3339, spec)
		if err != nil {
			bad("at %q: want RFC 3339, like 2030-01-01T02:00:00Z", spec)
			return
		}
		sc.At = t
	case "cron":
		sc.Cron, sc.TimeZone = spec, strings.TrimSpace(r.PostFormValue("tz"))
	default:
		bad("schedule kind %q: want every, cron, in or at", kind)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	created, err := s.sched.Create(ctx, &sc)
	if err != nil {
		s.failSchedules(ctx, w, r, p, err)
		return
	}
	s.log.Info("console added a schedule", "id", created.ID, "tool", created.Job.Tool)
	redirectDone(w, r, "/schedules", "scheduled", created.ID, 0)
}

// handleScheduleRemove removes a schedule, as `toolq schedule rm`.
func (s *Server) handleScheduleRemove(w http.ResponseWriter, r *http.Request) {
	p := &page{Title: "Schedules", Nav: "schedules"}
	id := r.PostFormValue("id")
	if !contracts.ValidID(id) {
		s.fail(w, r, "schedules", p, contracts.Errorf(contracts.CodeInvalidInput, "remove: %q is no schedule id", id))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	if err := s.sched.Delete(ctx, id); err != nil {
		s.failSchedules(ctx, w, r, p, err)
		return
	}
	s.log.Info("console removed a schedule", "id", id)
	redirectDone(w, r, "/schedules", "removed", id, 0)
}

// handleSchedulePause pauses (or, with resume, resumes) a schedule, as
// `toolq schedule pause|resume`.
func (s *Server) handleSchedulePause(w http.ResponseWriter, r *http.Request) {
	p := &page{Title: "Schedules", Nav: "schedules"}
	id := r.PostFormValue("id")
	if !contracts.ValidID(id) {
		s.fail(w, r, "schedules", p, contracts.Errorf(contracts.CodeInvalidInput, "pause: %q is no schedule id", id))
		return
	}
	resume := r.PostFormValue("resume") != ""
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	var err error
	done := "paused"
	if resume {
		err, done = s.sched.Resume(ctx, id), "resumed"
	} else {
		err = s.sched.Pause(ctx, id)
	}
	if err != nil {
		s.failSchedules(ctx, w, r, p, err)
		return
	}
	s.log.Info("console "+done+" a schedule", "id", id)
	redirectDone(w, r, "/schedules", done, id, 0)
}

// failSchedules shows the schedules page with err above the list.
func (s *Server) failSchedules(ctx context.Context, w http.ResponseWriter, r *http.Request, p *page, err error) {
	list, _ := s.sched.List(ctx)
	p.Data = list
	s.fail(w, r, "schedules", p, err)
}
