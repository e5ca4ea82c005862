package ui

import (
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolq/toolq/contracts"
)

// liveItem is what the live feed sends a page: a job's event, a dead
// letter's arrival or a breaker's change.
type liveItem struct {
	Kind    string           `json:"kind"` // "job", "dlq", "breaker"
	Tenant  string           `json:"tenant,omitempty"`
	Session string           `json:"session,omitempty"`
	JobID   string           `json:"jobId,omitempty"`
	Tool    string           `json:"tool,omitempty"`
	Status  string           `json:"status,omitempty"`
	Time    time.Time        `json:"time"`
	Error   *contracts.Error `json:"error,omitempty"`
	// Breaker is a breaker change's provider and model.
	Provider string `json:"provider,omitempty"`
	Model    string `json:"model,omitempty"`
}

// liveFilter narrows a feed; "" matches anything, tenant "." the
// default tenant only.
type liveFilter struct {
	tenant, session, tool, job string
	// kind is "job", "dlq" or "breaker" ("" for every kind).
	kind string
}

func (f *liveFilter) match(it *liveItem) bool {
	if f.kind != "" && it.Kind != f.kind {
		return false
	}
	if it.Kind == "breaker" {
		return true
	}
	switch f.tenant {
	case "":
	case defaultTenant:
		if it.Tenant != "" {
			return false
		}
	default:
		if it.Tenant != f.tenant {
			return false
		}
	}
	return (f.session == "" || it.Session == f.session) && (f.tool == "" || it.Tool == f.tool) && (f.job == "" || it.JobID == f.job)
}

// listener is one open live feed.
type listener struct {
	f  liveFilter
	ch chan []byte
	// lagged is closed when the listener fell behind and was dropped: the
	// page reconnects and reloads what it shows.
	lagged chan struct{}
}

// hub turns the console's NATS subscriptions into live feeds: every
// event of every tenant (the toolq account sees them all; a feed's filter
// picks), dead letters as they arrive, and breaker changes (the breakers
// page reads the state itself from the breakers bucket).
type hub struct {
	s contracts.Subjects

	mu        sync.Mutex
	listeners map[*listener]struct{}
	closed    bool
	subs      []*nats.Subscription
}

func newHub(s contracts.Subjects) *hub {
	return &hub{s: s, listeners: map[*listener]struct{}{}}
}

// subscribe starts the subscriptions on nc; close ends them.
func (h *hub) subscribe(nc *nats.Conn) error {
	for _, subj := range []string{h.s.Events(), h.s.TenantEvents(), h.s.DLQs(), h.s.Breakers()} {
		sub, err := nc.Subscribe(subj, h.onMsg)
		if err != nil {
			h.unsubscribe()
			return err
		}
		_ = sub.SetPendingLimits(64*1024, 64<<20)
		h.mu.Lock()
		h.subs = append(h.subs, sub)
		h.mu.Unlock()
	}
	return nc.Flush()
}

func (h *hub) unsubscribe() {
	h.mu.Lock()
	subs := h.subs
	h.subs = nil
	h.mu.Unlock()
	for _, sub := range subs {
		_ = sub.Unsubscribe()
	}
}

// close ends the subscriptions and every feed.
func (h *hub) close() {
	h.unsubscribe()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for l := range h.listeners {
		delete(h.listeners, l)
		close(l.lagged)
	}
}

func (h *hub) onMsg(m *nats.Msg) {
	it, ok := h.decode(m)
	if !ok {
		return
	}
	data, err := json.Marshal(it)
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for l := range h.listeners {
		if !l.f.match(it) {
			continue
		}
		select {
		case l.ch <- data:
		default:
			delete(h.listeners, l)
			close(l.lagged)
		}
	}
}

// decode reads a message of one of the subscriptions.
func (h *hub) decode(m *nats.Msg) (*liveItem, bool) {
	tenant, ok := h.s.TenantOf(m.Subject)
	if !ok {
		return nil, false
	}
	switch {
	case matches(m.Subject, h.s.Breakers()):
		var ev struct {
			Time time.Time `json:"time"`
			Data struct {
				Provider, Model, From, To string
				RetryAfterMs              int64
			} `json:"data"`
		}
		if json.Unmarshal(m.Data, &ev) != nil {
			return nil, false
		}
		return &liveItem{Kind: "breaker", Provider: ev.Data.Provider, Model: ev.Data.Model, Status: ev.Data.To, Time: ev.Time}, true
	case matches(m.Subject, h.s.DLQs()):
		var dl contracts.DeadLetter
		if json.Unmarshal(m.Data, &dl) != nil {
			return nil, false
		}
		return &liveItem{Kind: "dlq", Tenant: dl.Tenant, Session: dl.Session, JobID: dl.JobID, Tool: dl.Tool, Time: dl.Time, Error: dl.Error}, true
	}
	var ev contracts.Event
	if json.Unmarshal(m.Data, &ev) != nil || !contracts.ValidID(ev.Data.JobID) {
		return nil, false
	}
	it := &liveItem{
		Kind: "job", Tenant: tenant, Session: ev.Data.Session, JobID: ev.Data.JobID, Tool: ev.Data.Tool,
		Status: string(ev.Data.Status), Time: ev.Time,
	}
	if ev.Data.Error != nil {
		it.Error = &contracts.Error{Code: ev.Data.Error.Code, Message: clip(ev.Data.Error.Message, 300)}
	}
	return it, true
}

// listen opens a feed; the caller ends it with unlisten.
func (h *hub) listen(f liveFilter) *listener {
	l := &listener{f: f, ch: make(chan []byte, 256), lagged: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		close(l.lagged)
		return l
	}
	h.listeners[l] = struct{}{}
	return l
}

func (h *hub) unlisten(l *listener) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.listeners[l]; ok {
		delete(h.listeners, l)
		close(l.lagged)
	}
}

// matches reports whether subject matches the wildcard pattern.
func matches(subject, pattern string) bool {
	st, pt := strings.Split(subject, "."), strings.Split(pattern, ".")
	for i, p := range pt {
		if p == ">" {
			return len(st) > i
		}
		if i >= len(st) || (p != "*" && p != st[i]) {
			return false
		}
	}
	return len(st) == len(pt)
}

// clip cuts s to n bytes at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
