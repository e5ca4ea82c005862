package ui

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/toolq/toolq/cmd/toolq/internal/operator"
	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
)

// maxDeadLetters bounds the DLQ page's table.
const maxDeadLetters = 200

type dlqData struct {
	Rows []operator.Row
	Cut  bool
}

// opFilter is f as the operator package's dead-letter filter.
func opFilter(f filter, limit int) (*operator.Filter, bool) {
	of := &operator.Filter{Tool: f.Tool, Session: f.Session, Tenant: f.Tenant, Limit: limit}
	// The default tenant's dead letters have no tenant: the operator
	// filter's "" is every tenant, so the page filters those itself.
	only := f.Tenant == defaultTenant
	if only {
		of.Tenant = ""
	}
	return of, only
}

func (s *Server) handleDLQ(w http.ResponseWriter, r *http.Request) {
	p := &page{Title: "Dead letters"}
	f, err := parseFilter(r)
	if err != nil {
		s.fail(w, r, "dlq", p, err)
		return
	}
	p.Filter, p.Live = f, filter{Tenant: f.Tenant, Tool: f.Tool, Session: f.Session}.liveURL("kind", "dlq")
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	p.Tenants = s.tenants(ctx)
	d := &dlqData{}
	p.Data = d
	q, err := operator.OpenDLQ(ctx, s.js, s.cfg.Subjects)
	if err != nil {
		if errors.Is(err, operator.ErrNoDLQ) {
			s.render(w, r, "dlq", p)
			return
		}
		s.fail(w, r, "dlq", p, err)
		return
	}
	of, onlyDefault := opFilter(f, 0)
	err = q.Walk(ctx, of, func(dl *operator.DeadLetter) error {
		if onlyDefault && dl.DL.Tenant != "" {
			return nil
		}
		if len(d.Rows) == maxDeadLetters {
			d.Cut = true
			return operator.ErrStop
		}
		d.Rows = append(d.Rows, dl.Row())
		return nil
	})
	if err != nil {
		s.fail(w, r, "dlq", p, err)
		return
	}
	s.render(w, r, "dlq", p)
}

type deadLetterData struct {
	D       *operator.DeadLetter
	Row     operator.Row
	Problem string
}

func (s *Server) handleDeadLetter(w http.ResponseWriter, r *http.Request) {
	p := &page{Title: "Dead letter", Nav: "dlq"}
	seq, err := strconv.ParseUint(r.URL.Query().Get("seq"), 10, 64)
	if err != nil || seq == 0 {
		s.fail(w, r, "deadletter", p, contracts.Errorf(contracts.CodeInvalidInput, "a dead letter is named by its sequence"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	_, d, err := s.deadLetter(ctx, seq)
	if err != nil {
		s.fail(w, r, "deadletter", p, err)
		return
	}
	dd := &deadLetterData{D: d, Row: d.Row()}
	if _, err := operator.RequeueJob(d); err != nil {
		dd.Problem = err.Error()
	}
	p.Data = dd
	p.Title = "Dead letter " + strconv.FormatUint(seq, 10)
	s.render(w, r, "deadletter", p)
}

// deadLetter opens the DLQ and reads the dead letter at seq; one that is
// gone is invalid input.
func (s *Server) deadLetter(ctx context.Context, seq uint64) (*operator.DLQ, *operator.DeadLetter, error) {
	q, err := operator.OpenDLQ(ctx, s.js, s.cfg.Subjects)
	if err != nil {
		return nil, nil, err
	}
	d, err := q.Get(ctx, seq)
	if err == nil && d == nil {
		err = contracts.Errorf(contracts.CodeInvalidInput, "no dead letter %d (requeued, purged or aged out)", seq)
	}
	return q, d, err
}

// handleRequeue requeues one dead letter, as `toolq dlq requeue SEQ`.
func (s *Server) handleRequeue(w http.ResponseWriter, r *http.Request) {
	p := &page{Title: "Dead letters", Nav: "dlq", Data: &dlqData{}}
	seq, err := strconv.ParseUint(r.PostFormValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		s.fail(w, r, "dlq", p, contracts.Errorf(contracts.CodeInvalidInput, "requeue: name a dead letter by its sequence"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	q, d, err := s.deadLetter(ctx, seq)
	if err != nil {
		s.fail(w, r, "dlq", p, err)
		return
	}
	events, err := bus.NewEvents(ctx, s.js, s.cfg.Subjects)
	if err != nil {
		s.fail(w, r, "dlq", p, err)
		return
	}
	res, err := q.Requeue(ctx, d, events)
	if err != nil {
		s.fail(w, r, "dlq", p, err)
		return
	}
	s.log.Info("console requeued a dead letter", "seq", seq, "job", res.JobID, "as", res.RequeuedAs, "tenant", res.Tenant)
	redirectDone(w, r, "/dlq", "requeued", res.RequeuedAs, seq)
}

// handlePurge deletes one dead letter (seq) or every one the filter
// selects, as `toolq dlq purge`.
func (s *Server) handlePurge(w http.ResponseWriter, r *http.Request) {
	p := &page{Title: "Dead letters", Nav: "dlq", Data: &dlqData{}}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Timeout)
	defer cancel()
	q, err := operator.OpenDLQ(ctx, s.js, s.cfg.Subjects)
	if err != nil {
		s.fail(w, r, "dlq", p, err)
		return
	}
	var seqs []uint64
	whole := false
	if v := r.PostFormValue("seq"); v != "" {
		seq, err := strconv.ParseUint(v, 10, 64)
		if err != nil || seq == 0 {
			s.fail(w, r, "dlq", p, contracts.Errorf(contracts.CodeInvalidInput, "purge: %q is no sequence", v))
			return
		}
		seqs = append(seqs, seq)
	} else {
		f := filter{Tenant: r.PostFormValue("tenant"), Tool: r.PostFormValue("tool"), Session: r.PostFormValue("session")}
		if (f.Tenant != "" && f.Tenant != defaultTenant && !contracts.ValidID(f.Tenant)) ||
			(f.Tool != "" && !contracts.ValidTool(f.Tool)) || (f.Session != "" && !contracts.ValidID(f.Session)) {
			s.fail(w, r, "dlq", p, contracts.Errorf(contracts.CodeInvalidInput, "purge: invalid filter"))
			return
		}
		of, onlyDefault := opFilter(f, 0)
		whole = !of.Narrowed() && !onlyDefault
		if err := q.Walk(ctx, of, func(dl *operator.DeadLetter) error {
			if !onlyDefault || dl.DL.Tenant == "" {
				seqs = append(seqs, dl.Seq)
			}
			return nil
		}); err != nil {
			s.fail(w, r, "dlq", p, err)
			return
		}
	}
	n, err := q.Purge(ctx, seqs, whole)
	if err != nil {
		s.fail(w, r, "dlq", p, err)
		return
	}
	s.log.Info("console purged dead letters", "count", n)
	redirectDone(w, r, "/dlq", "purged", "", uint64(n)) //nolint:gosec // G115: a count
}

// redirectDone sends the browser back to path after an action (POST,
// redirect, GET), with what was done.
func redirectDone(w http.ResponseWriter, r *http.Request, path, done, id string, n uint64) {
	v := url.Values{"done": {done}}
	if id != "" {
		v.Set("id", id)
	}
	v.Set("n", strconv.FormatUint(n, 10))
	http.Redirect(w, r, path+"?"+v.Encode(), http.StatusSeeOther)
}
