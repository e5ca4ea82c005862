package demo

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Path is the endpoint the server answers, below its URL.
const Path = "/v1/responses"

// Label starts every answer's message text: the result says plainly that no
// model was called.
const Label = "demo provider: no model was called"

// MaxBodyBytes bounds a request body; larger ones get 413.
const MaxBodyBytes = 1 << 20

// DefaultListen is where a Server listens unless told otherwise.
const DefaultListen = "127.0.0.1:0"

// Config configures a Server.
type Config struct {
	// Listen is the TCP address; DefaultListen (loopback, a random port)
	// when empty. Only loopback addresses are accepted.
	Listen string
	// APIKey is the one bearer key the server accepts; a random key when
	// empty (read it with Server.APIKey).
	APIKey string
	// Logger receives one debug record per request; nothing when nil.
	Logger *slog.Logger
}

// Server is the demo provider. Start it, point a provider's BaseURL at URL
// with APIKey, and Stop it.
type Server struct {
	key  string
	log  *slog.Logger
	addr string

	mu   sync.Mutex
	ln   net.Listener
	http *http.Server
	done chan struct{}
	err  error
	n    atomic.Uint64
}

// NewServer validates cfg and returns a Server that is not yet listening.
func NewServer(cfg *Config) (*Server, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	addr := cfg.Listen
	if addr == "" {
		addr = DefaultListen
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("demo provider: listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("demo provider: listen address %q is not a loopback address", addr)
	}
	key := cfg.APIKey
	if key == "" {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("demo provider: key: %w", err)
		}
		key = "demo-" + hex.EncodeToString(b)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{key: key, log: log, addr: addr}, nil
}

// APIKey is the bearer key the server accepts.
func (s *Server) APIKey() string { return s.key }

// URL is the server's base URL (http://127.0.0.1:PORT), once started.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return "http://" + s.ln.Addr().String()
}

// Handler is the server's HTTP handler, for mounting it elsewhere (tests).
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// Start listens and serves until Stop. A second Start fails.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return errors.New("demo provider: already started")
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("demo provider: %w", err)
	}
	s.ln = ln
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	s.http, s.done = hs, done
	go func() { // owned: Stop waits on done
		defer close(done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.err = err // read by Stop after done
		}
	}()
	return nil
}

// Stop shuts the server down, letting requests in flight finish until ctx
// ends. Stop before Start and a second Stop do nothing.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	hs, done := s.http, s.done
	s.http = nil
	s.mu.Unlock()
	if hs == nil {
		return nil
	}
	err := hs.Shutdown(ctx)
	<-done
	return errors.Join(err, s.err)
}

// request is the part of a Responses request body the server reads; a
// field not listed is refused, as the API refuses unknown parameters.
type request struct {
	Model        string            `json:"model"`
	Input        json.RawMessage   `json:"input"`
	Instructions *string           `json:"instructions"`
	Tools        []json.RawMessage `json:"tools"`
	ToolChoice   json.RawMessage   `json:"tool_choice"`
	Store        *bool             `json:"store"`
	Include      []string          `json:"include"`
	Reasoning    *struct {
		Effort  string `json:"effort"`
		Summary string `json:"summary"`
	} `json:"reasoning"`
	MaxTurns           *int              `json:"max_turns"`
	MaxToolCalls       *int              `json:"max_tool_calls"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Stream             bool              `json:"stream"`
	User               *string           `json:"user"`
	Metadata           map[string]string `json:"metadata"`
}

type message struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type part struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// badRequest is a refusal: its status and message.
type badRequest struct {
	status int
	msg    string
}

func (e *badRequest) Error() string { return e.msg }

func refuse(status int, format string, args ...any) *badRequest {
	return &badRequest{status: status, msg: fmt.Sprintf(format, args...)}
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	resp, err := s.answer(w, r)
	if err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelDebug, "demo provider refused a request",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", err.status), slog.String("error", err.msg))
		if err.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", http.MethodPost)
		}
		writeJSON(w, err.status, map[string]string{"code": http.StatusText(err.status), "error": err.msg})
		return
	}
	s.log.LogAttrs(r.Context(), slog.LevelDebug, "demo provider answered", slog.String("id", resp["id"].(string)))
	writeJSON(w, http.StatusOK, resp)
}

// answer checks r as the API would and returns the canned response.
func (s *Server) answer(w http.ResponseWriter, r *http.Request) (map[string]any, *badRequest) {
	if r.URL.Path != Path {
		return nil, refuse(http.StatusNotFound, "no such endpoint %q (the demo provider answers POST %s)", r.URL.Path, Path)
	}
	if r.Method != http.MethodPost {
		return nil, refuse(http.StatusMethodNotAllowed, "method %s not allowed on %s", r.Method, Path)
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return nil, refuse(http.StatusUnauthorized, "no API key: send Authorization: Bearer <key>")
	}
	key, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(key), []byte(s.key)) != 1 {
		return nil, refuse(http.StatusUnauthorized, "incorrect API key provided")
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, refuse(http.StatusUnsupportedMediaType, "Content-Type must be application/json")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return nil, refuse(http.StatusRequestEntityTooLarge, "request body larger than %d bytes", MaxBodyBytes)
		}
		return nil, refuse(http.StatusBadRequest, "reading request body: %v", err)
	}
	req, task, bad := parse(body)
	if bad != nil {
		return nil, bad
	}
	return s.response(req, task), nil
}

// knownInclude are the include values the API documents.
var knownInclude = map[string]bool{
	"code_interpreter_call.outputs":         true,
	"reasoning.encrypted_content":           true,
	"message.output_text.logprobs":          true,
	"web_search_call.action.sources":        true,
	"file_search_call.results":              true,
	"message.input_image.image_url":         true,
	"computer_call_output.output.image_url": true,
}

// parse decodes and checks a request body; it returns the request, the
// text of its user messages, or the refusal.
func parse(body []byte) (*request, string, *badRequest) {
	var req request
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, "", refuse(http.StatusBadRequest, "invalid JSON body: %v", err)
	}
	if dec.More() {
		return nil, "", refuse(http.StatusBadRequest, "invalid JSON body: data after the object")
	}
	if strings.TrimSpace(req.Model) == "" {
		return nil, "", refuse(http.StatusBadRequest, "model is required")
	}
	if req.Stream {
		return nil, "", refuse(http.StatusBadRequest, "stream is not supported by the demo provider")
	}
	task, bad := userText(req.Input)
	if bad != nil {
		return nil, "", bad
	}
	for i, raw := range req.Tools {
		var t struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(raw, &t); err != nil || t.Type == "" {
			return nil, "", refuse(http.StatusBadRequest, "tools[%d]: an object with a type is required", i)
		}
	}
	for _, inc := range req.Include {
		if !knownInclude[inc] {
			return nil, "", refuse(http.StatusBadRequest, "include: unknown value %q", inc)
		}
	}
	if req.Reasoning != nil {
		switch req.Reasoning.Effort {
		case "", "none", "minimal", "low", "medium", "high":
		default:
			return nil, "", refuse(http.StatusBadRequest, "reasoning.effort: unknown value %q", req.Reasoning.Effort)
		}
	}
	for name, v := range map[string]*int{"max_turns": req.MaxTurns, "max_tool_calls": req.MaxToolCalls, "max_output_tokens": req.MaxOutputTokens} {
		if v != nil && *v < 1 {
			return nil, "", refuse(http.StatusBadRequest, "%s must be a positive integer", name)
		}
	}
	return &req, task, nil
}

// userText returns the text of the user messages of input: a string, or a
// list of messages whose content is a string or a list of text parts.
func userText(input json.RawMessage) (string, *badRequest) {
	if len(input) == 0 || string(input) == "null" {
		return "", refuse(http.StatusBadRequest, "input is required")
	}
	var s string
	if err := json.Unmarshal(input, &s); err == nil {
		if strings.TrimSpace(s) == "" {
			return "", refuse(http.StatusBadRequest, "input is empty")
		}
		return s, nil
	}
	var msgs []message
	if err := json.Unmarshal(input, &msgs); err != nil {
		return "", refuse(http.StatusBadRequest, "input: a string or a list of messages is required")
	}
	var text []string
	for i, m := range msgs {
		if m.Type != "" && m.Type != "message" {
			return "", refuse(http.StatusBadRequest, "input[%d].type: unknown value %q", i, m.Type)
		}
		switch m.Role {
		case "user", "system", "developer", "assistant":
		default:
			return "", refuse(http.StatusBadRequest, "input[%d].role: unknown value %q", i, m.Role)
		}
		var c string
		if err := json.Unmarshal(m.Content, &c); err != nil {
			var parts []part
			if err := json.Unmarshal(m.Content, &parts); err != nil {
				return "", refuse(http.StatusBadRequest, "input[%d].content: a string or a list of parts is required", i)
			}
			var b strings.Builder
			for _, p := range parts {
				b.WriteString(p.Text)
			}
			c = b.String()
		}
		if m.Role == "user" {
			text = append(text, c)
		}
	}
	task := strings.Join(text, "\n")
	if strings.TrimSpace(task) == "" {
		return "", refuse(http.StatusBadRequest, "input has no user message with text")
	}
	return task, nil
}

// response is the canned Responses body for req: when the request offers
// code_interpreter, one code_interpreter_call that prints the task (its
// logs only when asked for by include), then the labelled message.
func (s *Server) response(req *request, task string) map[string]any {
	n := s.n.Add(1)
	var output []any
	calls := 0
	if offers(req.Tools, "code_interpreter") {
		calls = 1
		call := map[string]any{
			"type": "code_interpreter_call", "id": fmt.Sprintf("ci_demo_%d", n), "status": "completed",
			"code": "print(" + strconv.Quote(task) + ")", "outputs": nil,
		}
		for _, inc := range req.Include {
			if inc == "code_interpreter_call.outputs" {
				logs, _ := json.Marshal(map[string]any{"stdout": task + "\n", "stderr": "", "exit_code": 0, "command_timed_out": false})
				call["outputs"] = []any{map[string]any{"type": "logs", "logs": string(logs)}}
			}
		}
		output = append(output, call)
	}
	text := Label + ". This canned answer comes from a local stand-in for xAI's Responses API; " +
		"the program above was not run either, it shows what printing your task would give:\n\n" + task
	output = append(output, map[string]any{
		"type": "message", "id": fmt.Sprintf("msg_demo_%d", n), "role": "assistant", "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}},
	})
	return map[string]any{
		"id": fmt.Sprintf("resp_demo_%d", n), "object": "response", "created_at": time.Now().Unix(),
		"model": req.Model, "status": "completed", "output": output,
		"usage": map[string]any{
			"input_tokens": 0, "output_tokens": 0, "total_tokens": 0,
			"server_side_tool_usage_details": map[string]any{"code_interpreter_calls": calls},
			"cost_in_usd_ticks":              0,
		},
	}
}

// offers reports whether tools includes one of type typ.
func offers(tools []json.RawMessage, typ string) bool {
	for _, raw := range tools {
		var t struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(raw, &t) == nil && t.Type == typ {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
