package mcp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/toolq/toolq/contracts"
)

// Defaults of Config.
const (
	DefaultConnectTimeout = 15 * time.Second
	DefaultCallTimeout    = 2 * time.Minute
	// MaxServerName bounds a server's name, so that mcp.<server>.<tool>
	// leaves room for the tool's name in a 128-byte tool token.
	MaxServerName = 40
)

// Config lists the MCP servers a worker runs tools of.
type Config struct {
	// Servers by name. A name is an id token ([A-Za-z0-9_-], at most
	// MaxServerName bytes); it is the <server> of the bus tool
	// mcp.<server>.<tool>, of the catalog id mcp:<server>:<tool> and, in
	// camel case, of the guest namespace MCP.<server>.
	Servers map[string]ServerConfig `json:"servers"`
	// ConnectTimeout bounds connecting to a server and listing its tools
	// (DefaultConnectTimeout when zero).
	ConnectTimeout time.Duration `json:"-"`
	// CallTimeout bounds a tool call whose context has no deadline
	// (DefaultCallTimeout when zero).
	CallTimeout time.Duration `json:"-"`
	// Logger gets connection changes and refused tools (slog.Default when
	// nil).
	Logger *slog.Logger `json:"-"`
}

// ServerConfig is one server: either a command speaking MCP on its stdin and
// stdout, or the URL of a streamable HTTP endpoint.
type ServerConfig struct {
	// Command, Args and Env start a stdio server. The child gets Env on top
	// of a minimal environment (PATH, HOME, USER, LANG, TMPDIR…), never the
	// worker's whole environment.
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// URL and Headers reach a streamable HTTP server; Headers go on every
	// request (Authorization, for example).
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Tenants, when set, keeps the server to these tenants ("" is the
	// default tenant): only their jobs of its tools are pulled, and only
	// their code-mode runs see MCP.<server> (worker.ToolConfig.Tenants).
	// Absent: every tenant the worker serves.
	Tenants []string `json:"tenants,omitempty"`
}

// ParseConfig reads a JSON configuration: {"servers": {name: server}}; the
// common {"mcpServers": {…}} spelling is accepted too. Unknown fields are
// refused.
func ParseConfig(data []byte) (*Config, error) {
	var raw struct {
		Servers    map[string]ServerConfig `json:"servers"`
		MCPServers map[string]ServerConfig `json:"mcpServers"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "mcp config: %v", err)
	}
	if raw.Servers != nil && raw.MCPServers != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "mcp config: give servers or mcpServers, not both")
	}
	cfg := &Config{Servers: raw.Servers}
	if cfg.Servers == nil {
		cfg.Servers = raw.MCPServers
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// LoadConfig reads ParseConfig's format from a file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path) //nolint:gosec // G304: the operator names the MCP config file
	if err != nil {
		return nil, fmt.Errorf("mcp config: %w", err)
	}
	return ParseConfig(data)
}

func (c *Config) validate() error {
	namespaces := map[string]string{}
	for _, name := range c.names() {
		s := c.Servers[name]
		if !contracts.ValidID(name) || len(name) > MaxServerName {
			return contracts.Errorf(contracts.CodeInvalidInput, "mcp server name %q: want [A-Za-z0-9_-]{1,%d}", name, MaxServerName)
		}
		ns := Namespace(name)
		if ns == "" {
			return contracts.Errorf(contracts.CodeInvalidInput, "mcp server name %q needs a letter or digit", name)
		}
		if other, dup := namespaces[ns]; dup {
			return contracts.Errorf(contracts.CodeInvalidInput, "mcp servers %q and %q would share the guest namespace MCP.%s", other, name, ns)
		}
		namespaces[ns] = name
		if s.Tenants != nil && len(s.Tenants) == 0 {
			return contracts.Errorf(contracts.CodeInvalidInput, "mcp server %s: tenants is empty: name at least one (\"\" is the default tenant) or leave it out", name)
		}
		for _, t := range s.Tenants {
			if t != "" && !contracts.ValidID(t) {
				return contracts.Errorf(contracts.CodeInvalidInput, "mcp server %s: tenant %q is not a tenant id", name, t)
			}
		}
		switch {
		case s.Command != "" && s.URL != "":
			return contracts.Errorf(contracts.CodeInvalidInput, "mcp server %s: give command or url, not both", name)
		case s.Command == "" && s.URL == "":
			return contracts.Errorf(contracts.CodeInvalidInput, "mcp server %s: needs a command or a url", name)
		case s.URL != "":
			u, err := url.Parse(s.URL)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return contracts.Errorf(contracts.CodeInvalidInput, "mcp server %s: url must be http(s)://host/…", name)
			}
			if len(s.Args) > 0 || len(s.Env) > 0 {
				return contracts.Errorf(contracts.CodeInvalidInput, "mcp server %s: args and env are for command servers", name)
			}
			for h, v := range s.Headers {
				if !headerName(h) || strings.ContainsAny(v, "\r\n\x00") {
					return contracts.Errorf(contracts.CodeInvalidInput, "mcp server %s: header %q is not a valid header", name, h)
				}
				if protocolHeaders[http.CanonicalHeaderKey(h)] {
					return contracts.Errorf(contracts.CodeInvalidInput, "mcp server %s: header %s belongs to the protocol", name, h)
				}
			}
		default:
			if len(s.Headers) > 0 {
				return contracts.Errorf(contracts.CodeInvalidInput, "mcp server %s: headers are for url servers", name)
			}
		}
	}
	return nil
}

// names returns the server names in order.
func (c *Config) names() []string {
	out := make([]string, 0, len(c.Servers))
	for n := range c.Servers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (c Config) withDefaults() (Config, error) {
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, c.validate()
}

// Namespace is the guest namespace of a server: MCP.<Namespace(server)>,
// the server's name in camel case ("chrome-devtools" → "chromeDevtools"),
// as the code-mode sandbox derives it.
func Namespace(server string) string {
	parts := strings.FieldsFunc(server, func(r rune) bool {
		return r >= utf8.RuneSelf || (!unicode.IsLetter(r) && !unicode.IsDigit(r))
	})
	var b strings.Builder
	for i, p := range parts {
		if i == 0 {
			b.WriteString(strings.ToLower(p[:1]) + p[1:])
		} else {
			b.WriteString(strings.ToUpper(p[:1]) + p[1:])
		}
	}
	s := b.String()
	if s != "" && s[0] >= '0' && s[0] <= '9' {
		s = "_" + s
	}
	return s
}

// protocolHeaders are set by the MCP transport itself.
var protocolHeaders = map[string]bool{
	"Mcp-Session-Id": true, "Mcp-Protocol-Version": true, "Last-Event-Id": true,
	"Content-Type": true, "Content-Length": true, "Accept": true, "Host": true,
}

// headerName reports whether h is an HTTP header name (an RFC 7230 token).
func headerName(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}
