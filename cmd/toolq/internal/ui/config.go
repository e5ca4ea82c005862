package ui

import (
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/toolq/toolq/contracts"
)

// MinTokenBytes is the shortest access token the console takes (the same
// floor as `toolq mcp serve --http-token-file`).
const MinTokenBytes = 16

// DefaultListen is the console's address when Config.Listen is empty.
const DefaultListen = "127.0.0.1:8470"

// Config configures a Server. The zero value serves on DefaultListen
// without a token.
type Config struct {
	// Subjects names the streams and buckets; prefix "toolq" by default.
	Subjects contracts.Subjects
	// Listen is host:port; a bare port or :port binds 127.0.0.1. Port 0
	// picks a free one (URL tells which).
	Listen string
	// Token is the access token. Without one only a loopback Listen is
	// taken; with one every request must carry it (the login form's
	// cookie, or Authorization: Bearer). At least MinTokenBytes.
	Token string
	// Timeout bounds each request's NATS calls; 10 s by default.
	Timeout time.Duration
	// EventsWindow is how many of the newest messages of the events stream
	// the jobs page reads; 5000 by default.
	EventsWindow int
	// DecideSession is the session of the exec.decide jobs the console
	// relays; "approvals" by default, as `toolq approve`.
	DecideSession string
	// SeedHint, when set, is where the approvals page says an approver
	// seed is kept (toolq dev's path). The console never reads the file:
	// the person loads it into the page.
	SeedHint string
	// Logger receives the console's logs; slog.Default() when nil.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if !strings.Contains(c.Listen, ":") {
		c.Listen = ":" + c.Listen
	}
	host, port, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return c, contracts.Errorf(contracts.CodeInvalidInput, "console listen address %q: want host:port: %v", c.Listen, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	c.Listen = net.JoinHostPort(host, port)
	c.Token = strings.TrimSpace(c.Token)
	if c.Token != "" && len(c.Token) < MinTokenBytes {
		return c, contracts.Errorf(contracts.CodeInvalidInput, "the console token must be at least %d bytes", MinTokenBytes)
	}
	if c.Token == "" && !Loopback(host) {
		return c, contracts.Errorf(contracts.CodeInvalidInput,
			"console listen address %q is not a loopback address: anyone who reaches it acts with the console's operator credentials; "+
				"listen on 127.0.0.1 or give the console a token (--token-file or TOOLQ_UI_TOKEN)", c.Listen)
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.EventsWindow <= 0 {
		c.EventsWindow = 5000
	}
	if c.DecideSession == "" {
		c.DecideSession = "approvals"
	}
	if err := contracts.ValidateID("decide session", c.DecideSession); err != nil {
		return c, err
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// Loopback reports whether host (a name or an address, without port) is
// a loopback one: localhost, 127.0.0.0/8 or ::1.
func Loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
