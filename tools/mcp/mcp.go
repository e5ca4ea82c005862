package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolq/toolq/contracts"
)

// ToolPrefix is the first token of every bus tool of an MCP server:
// mcp.<server>.<tool>.
const ToolPrefix = contracts.ToolMCPPrefix

// Servers holds the sessions with the configured MCP servers and the tools
// they offer.
type Servers struct {
	cfg     Config
	servers []*server
	tools   []Tool
}

// New connects to every server of cfg (each within cfg.ConnectTimeout),
// lists its tools and returns them as toolq tools. A server that cannot be
// reached fails New: a worker configured with a server it cannot use does
// not start. Close the result when done.
func New(ctx context.Context, cfg *Config) (*Servers, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Servers{cfg: c}
	for _, name := range c.names() {
		srv := newServer(name, c.Servers[name], &s.cfg)
		s.servers = append(s.servers, srv)
		tools, err := srv.listTools(ctx)
		if err != nil {
			_ = s.Close()
			return nil, fmt.Errorf("mcp server %s: %w", name, err)
		}
		s.tools = append(s.tools, tools...)
	}
	return s, nil
}

// Tools returns the tools of every server, by server then tool name.
func (s *Servers) Tools() []Tool {
	if s == nil {
		return nil
	}
	return append([]Tool(nil), s.tools...)
}

// Close ends every session (and stops every stdio server). A nil Servers
// closes nothing.
func (s *Servers) Close() error {
	if s == nil {
		return nil
	}
	var err error
	for _, srv := range s.servers {
		err = errors.Join(err, srv.close())
	}
	return err
}

// server is one configured MCP server and its current session.
type server struct {
	name   string
	cfg    ServerConfig
	common *Config
	client *sdk.Client
	log    *slog.Logger

	mu     sync.Mutex
	sess   *session
	closed bool
}

// session is a live connection; done closes when it ends.
type session struct {
	cs   *sdk.ClientSession
	done chan struct{}
}

func newServer(name string, cfg ServerConfig, common *Config) *server {
	return &server{
		name:   name,
		cfg:    cfg,
		common: common,
		client: sdk.NewClient(&sdk.Implementation{Name: "toolq", Version: "1"}, &sdk.ClientOptions{Logger: common.Logger.With(slog.String("mcp_server", name))}),
		log:    common.Logger.With(slog.String("mcp_server", name)),
	}
}

// session returns the live session, connecting (again) when there is none
// or the last one ended.
func (s *server) session(ctx context.Context) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("closed")
	}
	if s.sess != nil {
		select {
		case <-s.sess.done:
			s.log.Warn("mcp session ended; reconnecting")
			_ = s.sess.cs.Close() // releases what is left (a stdio server is reaped)
			s.sess = nil
		default:
			return s.sess, nil
		}
	}
	cctx, cancel := context.WithTimeout(ctx, s.common.ConnectTimeout)
	defer cancel()
	cs, err := s.client.Connect(cctx, s.transport(), nil)
	if err != nil {
		return nil, err
	}
	sess := &session{cs: cs, done: make(chan struct{})}
	// Owned by the server: close waits for it after closing the session.
	go func() {
		_ = cs.Wait()
		close(sess.done)
	}()
	s.sess = sess
	return sess, nil
}

// drop ends sess if it is still the current session, so that the next call
// connects again.
func (s *server) drop(sess *session) {
	s.mu.Lock()
	if s.sess == sess {
		s.sess = nil
	}
	s.mu.Unlock()
	_ = sess.cs.Close()
	<-sess.done
}

func (s *server) close() error {
	s.mu.Lock()
	s.closed = true
	sess := s.sess
	s.sess = nil
	s.mu.Unlock()
	if sess == nil {
		return nil
	}
	// Ending a session is best effort: a server that is already gone
	// cannot be told.
	if err := sess.cs.Close(); err != nil && !errors.Is(err, sdk.ErrConnectionClosed) {
		s.log.Debug("mcp session close", slog.Any("err", err))
	}
	<-sess.done
	return nil
}

func (s *server) transport() sdk.Transport {
	if s.cfg.URL != "" {
		return &sdk.StreamableClientTransport{
			Endpoint:   s.cfg.URL,
			HTTPClient: &http.Client{Transport: &headerTransport{headers: s.cfg.Headers, next: httpTransport}},
			// A worker only sends requests; it needs no server-initiated
			// stream.
			DisableStandaloneSSE: true,
			MaxRetries:           -1,
		}
	}
	cmd := exec.Command(s.cfg.Command, s.cfg.Args...)
	cmd.Env = childEnv(s.cfg.Env)
	cmd.Stderr = &stderrLog{log: s.log}
	return &sdk.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
}

// listTools lists the server's tools and turns them into toolq tools,
// leaving out (with a warning) those whose metadata is unusable.
func (s *server) listTools(ctx context.Context) ([]Tool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.common.ConnectTimeout)
	defer cancel()
	sess, err := s.session(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	var out []Tool
	seen := map[string]string{}
	for t, err := range sess.cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		if len(out) == maxToolsPerServer {
			s.log.Warn("mcp server lists too many tools; the rest are left out", slog.Int("max", maxToolsPerServer))
			break
		}
		tool, err := s.newTool(t)
		if err == nil && reservedToken(tool.Catalog.Name) {
			err = errors.New("its name is taken by the server's resources or prompts")
		}
		if err != nil {
			s.log.Warn("mcp tool left out", slog.String("tool", clean(t.Name, 128, true)), slog.Any("err", err))
			continue
		}
		if other, dup := seen[tool.Name]; dup {
			s.log.Warn("mcp tool left out: its name collides with another", slog.String("tool", clean(t.Name, 128, true)), slog.String("other", other))
			continue
		}
		seen[tool.Name] = t.Name
		out = append(out, tool)
	}
	caps, err := s.capabilityTools(sess.cs.InitializeResult())
	if err != nil {
		return nil, err
	}
	out = append(out, caps...)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// newTool builds a toolq tool from the server's (untrusted) description.
func (s *server) newTool(t *sdk.Tool) (Tool, error) {
	if t.Name == "" || len(t.Name) > 256 {
		return Tool{}, errors.New("missing or overlong name")
	}
	token := toolToken(t.Name, contracts.MaxIDLength-len(ToolPrefix)-len(s.name)-2)
	in, err := schemaJSON(t.InputSchema)
	if err != nil {
		return Tool{}, fmt.Errorf("input %w", err)
	}
	inSchema, err := compile(in)
	if err != nil {
		return Tool{}, fmt.Errorf("input schema: %w", err)
	}
	entry := contracts.CatalogTool{
		ID:          contracts.SourceMCP + ":" + s.name + ":" + token,
		Tool:        contracts.MCPTool(s.name, token),
		Name:        token,
		Description: clean(t.Description, maxDescription, false),
		Source:      contracts.SourceMCP,
		InputSchema: in,
		// A remote server's claim that a tool is read-only is not trusted:
		// restartSafe runs never call MCP tools.
		SideEffects: true,
	}
	label := t.Title
	if label == "" && t.Annotations != nil {
		label = t.Annotations.Title
	}
	entry.Label = clean(label, maxLabel, true)
	if entry.Description == "" {
		entry.Description = "MCP tool " + token + " of server " + s.name + "."
	}
	if t.OutputSchema != nil {
		// An output schema only adds checks: one that cannot be used is
		// dropped, the tool stays.
		if out, err := outputSchema(t.OutputSchema); err != nil {
			s.log.Warn("mcp tool output schema left out", slog.String("tool", token), slog.Any("err", err))
		} else {
			entry.OutputSchema = out
		}
	}
	return Tool{
		Name:     entry.Tool,
		Catalog:  entry,
		srv:      s,
		remote:   t.Name,
		inSchema: inSchema,
	}, nil
}

// outputSchema checks a tool's output schema and wraps it in the
// McpToolResult's.
func outputSchema(v any) (json.RawMessage, error) {
	out, err := schemaJSON(v)
	if err != nil {
		return nil, err
	}
	wrapped, err := resultSchema(out)
	if err != nil {
		return nil, err
	}
	if _, err := compile(wrapped); err != nil {
		return nil, err
	}
	return wrapped, nil
}

// httpTransport dials with bounded timeouts; requests themselves are bounded
// by their contexts.
var httpTransport = &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	TLSHandshakeTimeout:   10 * time.Second,
	ResponseHeaderTimeout: 0,
	MaxIdleConnsPerHost:   16,
	IdleConnTimeout:       90 * time.Second,
	ForceAttemptHTTP2:     true,
}

// headerTransport adds the configured headers to every request.
type headerTransport struct {
	headers map[string]string
	next    http.RoundTripper
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.headers) > 0 {
		r = r.Clone(r.Context())
		for k, v := range t.headers {
			r.Header.Set(k, v)
		}
	}
	return t.next.RoundTrip(r)
}

// childEnvKeys are the variables a stdio server inherits from the worker;
// everything else (credentials above all) stays in the worker.
var childEnvKeys = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TERM", "TMPDIR", "TZ"}

func childEnv(extra map[string]string) []string {
	keys := childEnvKeys
	if runtime.GOOS == "windows" {
		keys = append(keys, "SystemRoot", "APPDATA", "LOCALAPPDATA", "USERPROFILE", "TEMP", "TMP", "PATHEXT", "ComSpec")
	}
	var env []string
	for _, k := range keys {
		if v, ok := os.LookupEnv(k); ok {
			if _, over := extra[k]; !over {
				env = append(env, k+"="+v)
			}
		}
	}
	names := make([]string, 0, len(extra))
	for k := range extra {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		env = append(env, k+"="+extra[k])
	}
	return env
}

// stderrLog logs a stdio server's stderr, line by line, at debug level.
type stderrLog struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte
}

func (w *stderrLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := indexNewline(w.buf)
		if i < 0 {
			break
		}
		w.log.Debug("mcp server stderr", slog.String("line", clean(string(w.buf[:i]), 1024, true)))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 4096 {
		w.log.Debug("mcp server stderr", slog.String("line", clean(string(w.buf), 1024, true)))
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

func indexNewline(b []byte) int {
	for i, c := range b {
		if c == '\n' {
			return i
		}
	}
	return -1
}
