package ui

import (
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/toolq/toolq/contracts"
)

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/jobs", http.StatusSeeOther) })
	mux.HandleFunc("GET /login", s.handleLoginForm)
	mux.HandleFunc("POST /login", s.handleLogin)
	mux.HandleFunc("GET /jobs", s.handleJobs)
	mux.HandleFunc("GET /job", s.handleJob)
	mux.HandleFunc("GET /runs", s.handleRuns)
	mux.HandleFunc("GET /approvals", s.handleApprovals)
	mux.HandleFunc("POST /approvals/decide", s.handleDecide)
	mux.HandleFunc("GET /breakers", s.handleBreakers)
	mux.HandleFunc("GET /schedules", s.handleSchedules)
	mux.HandleFunc("POST /schedules/add", s.handleScheduleAdd)
	mux.HandleFunc("POST /schedules/remove", s.handleScheduleRemove)
	mux.HandleFunc("POST /schedules/pause", s.handleSchedulePause)
	mux.HandleFunc("GET /dlq", s.handleDLQ)
	mux.HandleFunc("GET /dlq/show", s.handleDeadLetter)
	mux.HandleFunc("POST /dlq/requeue", s.handleRequeue)
	mux.HandleFunc("POST /dlq/purge", s.handlePurge)
	mux.HandleFunc("GET /live", s.handleLive)
	return mux
}

func (s *Server) handleLoginForm(w http.ResponseWriter, r *http.Request) {
	if s.guard.token == "" {
		http.Redirect(w, r, "/jobs", http.StatusSeeOther)
		return
	}
	s.render(w, r, "login", &page{Title: "Log in", Data: safeNext(r.URL.Query().Get("next"))})
}

func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.PostFormValue("next"))
	if !s.guard.login(w, r) {
		w.WriteHeader(http.StatusUnauthorized)
		s.render(&statusWriter{ResponseWriter: w}, r, "login", &page{Title: "Log in", Error: "wrong token", Data: next})
		return
	}
	http.Redirect(w, r, next, http.StatusSeeOther) //nolint:gosec // G710: safeNext keeps only a local path
}

// safeNext is a local path to go to after the login, never another site.
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || next == "" || u.IsAbs() || u.Host != "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return "/jobs"
	}
	return next
}

// handleLive is the live feed (server-sent events) of the items the
// query's filter selects: one "item" event per job event, dead letter or
// breaker change, as the console's subscriptions receive them. A feed
// that falls behind is ended; the browser reconnects and the page reloads
// what it shows.
func (s *Server) handleLive(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	lf := f.live()
	if job := r.URL.Query().Get("job"); job != "" {
		if !contracts.ValidID(job) {
			http.Error(w, "job is not a valid id", http.StatusBadRequest)
			return
		}
		lf.job = job
	}
	switch kind := r.URL.Query().Get("kind"); kind {
	case "", "job", "dlq", "breaker":
		lf.kind = kind
	default:
		http.Error(w, "kind is job, dlq or breaker", http.StatusBadRequest)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	l := s.hub.listen(lf)
	defer s.hub.unlisten(l)
	// The retry hint, and a first comment, so the page knows it is live.
	fmt.Fprint(w, "retry: 2000\n: live\n\n")
	flusher.Flush()
	beat := time.NewTicker(15 * time.Second)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-l.lagged:
			return
		case <-beat.C:
			fmt.Fprint(w, ": beat\n\n")
		case data := <-l.ch:
			fmt.Fprintf(w, "event: item\ndata: %s\n\n", data)
		}
		flusher.Flush()
	}
}
