package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/toolq/toolq/contracts"
)

// defaultTenant is the tenant filter's value for the default tenant (not
// an id, so no tenant can be named so).
const defaultTenant = "."

// page is what every template gets.
type page struct {
	Title string
	Nav   string
	CSRF  string
	// Filter is the page's filter (tenant, tool, session, status), as the
	// query gave it.
	Filter filter
	// Tenants are the tenants the filter offers.
	Tenants []string
	// Live is the URL of the page's live feed ("" for none).
	Live string
	// Done is what the last action did (from the redirect after it).
	Done  string
	Error string
	Data  any
}

// filter is a page's query: every field checked to be "" or an id (tool:
// a tool name; tenant: also defaultTenant; status: a status).
type filter struct {
	Tenant, Tool, Session, Status string
}

func (f filter) live() liveFilter {
	return liveFilter{tenant: f.Tenant, session: f.Session, tool: f.Tool}
}

// liveURL is the live feed of what f selects, narrowed by the extra
// query pairs.
func (f filter) liveURL(extra ...string) string {
	q := f.query()
	for i := 0; i+1 < len(extra); i += 2 {
		if q != "" {
			q += "&"
		}
		q += url.QueryEscape(extra[i]) + "=" + url.QueryEscape(extra[i+1])
	}
	return "/live?" + q
}

// query is f as a URL query.
func (f filter) query() string {
	v := url.Values{}
	for k, s := range map[string]string{"tenant": f.Tenant, "tool": f.Tool, "session": f.Session, "status": f.Status} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v.Encode()
}

// tenantMatch reports whether tenant passes f's tenant filter.
func (f filter) tenantMatch(tenant string) bool {
	switch f.Tenant {
	case "":
		return true
	case defaultTenant:
		return tenant == ""
	}
	return tenant == f.Tenant
}

// parseFilter reads and checks the filter of r's query.
func parseFilter(r *http.Request) (filter, error) {
	q := r.URL.Query()
	f := filter{Tenant: q.Get("tenant"), Tool: q.Get("tool"), Session: q.Get("session"), Status: q.Get("status")}
	switch {
	case f.Tenant != "" && f.Tenant != defaultTenant && !contracts.ValidID(f.Tenant):
		return filter{}, contracts.Errorf(contracts.CodeInvalidInput, "tenant %q is not a valid id", f.Tenant)
	case f.Tool != "" && !contracts.ValidTool(f.Tool):
		return filter{}, contracts.Errorf(contracts.CodeInvalidInput, "tool %q is not a tool name", f.Tool)
	case f.Session != "" && !contracts.ValidID(f.Session):
		return filter{}, contracts.Errorf(contracts.CodeInvalidInput, "session %q is not a valid id", f.Session)
	case f.Status != "" && !contracts.Status(f.Status).Valid():
		return filter{}, contracts.Errorf(contracts.CodeInvalidInput, "status %q is not a job status", f.Status)
	}
	return f, nil
}

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return time.Since(t).Round(time.Second).String()
	},
	"until": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return time.Until(t).Round(time.Second).String()
	},
	"dash": func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	},
	"tenantName": func(s string) string {
		if s == "" {
			return "(default)"
		}
		return s
	},
	"pretty": func(raw json.RawMessage) string {
		if len(raw) == 0 {
			return ""
		}
		var b bytes.Buffer
		if json.Indent(&b, raw, "", "  ") != nil {
			return string(raw)
		}
		return b.String()
	},
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"join": strings.Join,
	"statuses": func() []contracts.Status {
		return []contracts.Status{
			contracts.StatusRunning, contracts.StatusProgress, contracts.StatusWaiting, contracts.StatusApprovalPending,
			contracts.StatusApproved, contracts.StatusRunningNotice, contracts.StatusCompleted, contracts.StatusFailed,
			contracts.StatusCancelled, contracts.StatusDenied,
		}
	},
}

// render writes page name with p.
func (s *Server) render(w http.ResponseWriter, r *http.Request, name string, p *page) {
	p.CSRF = s.guard.csrf
	if p.Nav == "" {
		p.Nav = name
	}
	if p.Done == "" {
		p.Done = doneText(r.URL.Query())
	}
	var b bytes.Buffer
	if err := s.pages[name].Execute(&b, p); err != nil {
		s.log.Error("console template", "page", name, "err", err)
		http.Error(w, "template: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b.Bytes())
}

// fail renders page name with an error, with the status its code calls
// for.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, name string, p *page, err error) {
	p.Error = err.Error()
	code := http.StatusInternalServerError
	var ce *contracts.Error
	if errors.As(err, &ce) && ce.Code == contracts.CodeInvalidInput {
		code = http.StatusBadRequest
	}
	w.WriteHeader(code)
	s.render(&statusWriter{ResponseWriter: w}, r, name, p)
}

// statusWriter ignores a second WriteHeader (fail has written the status).
type statusWriter struct{ http.ResponseWriter }

func (w *statusWriter) WriteHeader(int) {}

// doneText is the message of a redirect after an action: built from the
// action's kind and its numbers, never from text a link could carry.
func doneText(q url.Values) string {
	id := q.Get("id")
	if id != "" && !contracts.ValidID(id) {
		id = ""
	}
	n := q.Get("n")
	for _, r := range n {
		if r < '0' || r > '9' {
			n = ""
			break
		}
	}
	switch q.Get("done") {
	case "requeued":
		return "requeued dead letter " + n + " as job " + id
	case "purged":
		return "purged " + n + " dead letters"
	case "scheduled":
		return "added schedule " + id
	case "removed":
		return "removed schedule " + id
	case "paused":
		return "paused schedule " + id
	case "resumed":
		return "resumed schedule " + id
	}
	return ""
}
