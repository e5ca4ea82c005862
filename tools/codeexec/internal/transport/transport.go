package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/toolq/toolq/tools/codeexec/provider"
)

// MaxResponseBytes bounds a response body read into memory.
const MaxResponseBytes = 32 << 20

// maxLoggedBody bounds a body written to the log.
const maxLoggedBody = 4096

// Caller sends requests for one provider.
type Caller struct {
	Provider string
	HTTP     *http.Client
	Log      *slog.Logger
	// Now is the clock used for HTTP-date Retry-After values.
	Now func() time.Time
}

// PostJSON posts body (marshalled) to u with the given headers and returns
// the 2xx response body. Failures are *provider.Error. secrets are values
// (API keys) that must never appear in logs.
func (c *Caller) PostJSON(ctx context.Context, u string, headers http.Header, body any, secrets ...string) ([]byte, error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, &provider.Error{Provider: c.Provider, Kind: provider.KindBadRequest, Message: "encode request", Err: err}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(payload))
	if err != nil {
		return nil, &provider.Error{Provider: c.Provider, Kind: provider.KindBadRequest, Message: "build request", Err: err}
	}
	for k, vs := range headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")

	log := c.Log
	debug := log != nil && log.Enabled(ctx, slog.LevelDebug)
	if debug {
		log.LogAttrs(ctx, slog.LevelDebug, "provider request",
			slog.String("provider", c.Provider),
			slog.String("url", Redact(u, secrets)),
			slog.String("body", Redact(clip(payload), secrets)))
	}

	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		if perr := provider.FromContext(ctx, c.Provider); perr != nil {
			return nil, perr
		}
		return nil, &provider.Error{Provider: c.Provider, Kind: provider.KindTransport, Message: Redact(transportMessage(err), secrets), Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		if perr := provider.FromContext(ctx, c.Provider); perr != nil {
			return nil, perr
		}
		return nil, &provider.Error{Provider: c.Provider, Kind: provider.KindTransport, Status: resp.StatusCode, Message: "reading response: " + Redact(transportMessage(err), secrets), Err: err}
	}
	if debug {
		log.LogAttrs(ctx, slog.LevelDebug, "provider response",
			slog.String("provider", c.Provider),
			slog.Int("status", resp.StatusCode),
			slog.String("body", Redact(clip(data), secrets)))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		now := time.Now
		if c.Now != nil {
			now = c.Now
		}
		kind := provider.KindForStatus(resp.StatusCode)
		if resp.StatusCode == 529 { // Anthropic: overloaded
			kind = provider.KindServer
		}
		return nil, &provider.Error{
			Provider:   c.Provider,
			Kind:       kind,
			Status:     resp.StatusCode,
			RetryAfter: RetryAfter(resp.Header.Get("Retry-After"), now()),
			Message:    Redact(ErrorMessage(data), secrets),
		}
	}
	if len(data) > MaxResponseBytes {
		return nil, provider.Malformed(c.Provider, "response larger than %d bytes", MaxResponseBytes)
	}
	return data, nil
}

func transportMessage(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		// url.Error repeats the URL, which may carry a key (Gemini accepts
		// ?key=); keep only the operation and the cause.
		return ue.Op + ": " + ue.Err.Error()
	}
	return err.Error()
}

// MaxRetryAfter caps a Retry-After the server asks for.
const MaxRetryAfter = 10 * time.Minute

// RetryAfter parses a Retry-After header: delay-seconds or an HTTP date.
// It returns 0 when absent or invalid.
func RetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs <= 0 || secs != secs {
			return 0
		}
		if secs > MaxRetryAfter.Seconds() {
			return MaxRetryAfter
		}
		d = time.Duration(secs * float64(time.Second))
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	if d < 0 {
		return 0
	}
	if d > MaxRetryAfter {
		return MaxRetryAfter
	}
	return d
}

// ErrorMessage extracts a human message from an error body in the common
// shapes ({"error":{"message":…}}, {"error":"…"}, {"message":…}), clipped.
func ErrorMessage(body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
	}
	if err := json.Unmarshal(body, &v); err == nil {
		var inner struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		}
		var s string
		switch {
		case len(v.Error) > 0 && json.Unmarshal(v.Error, &inner) == nil && inner.Message != "":
			return Clip(inner.Message, 500)
		case len(v.Error) > 0 && json.Unmarshal(v.Error, &s) == nil && s != "":
			return Clip(s, 500)
		case v.Message != "":
			return Clip(v.Message, 500)
		}
	}
	return Clip(strings.TrimSpace(string(body)), 200)
}

// keyPattern matches strings that look like provider API keys, for bodies
// that echo a key the caller did not pass in secrets.
var keyPattern = regexp.MustCompile(`(xai-|sk-ant-|sk-|AIza)[A-Za-z0-9_\-]{8,}`)

// Redact replaces every secret (and anything that looks like an API key)
// with "[REDACTED]".
func Redact(s string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) >= 4 {
			s = strings.ReplaceAll(s, sec, "[REDACTED]")
		}
	}
	return keyPattern.ReplaceAllString(s, "[REDACTED]")
}

func clip(b []byte) string { return Clip(string(b), maxLoggedBody) }

// Clip shortens s to at most n bytes on a UTF-8 boundary, marking the cut.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// JoinURL joins a base URL (which may carry a path prefix) and a path.
func JoinURL(base, path string) string {
	return strings.TrimRight(base, "/") + "/" + strings.TrimLeft(path, "/")
}

// Decode unmarshals a 2xx body into v, mapping failure to KindMalformed.
func Decode(p string, data []byte, v any) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return provider.Malformed(p, "response is not a JSON object")
	}
	if err := json.Unmarshal(data, v); err != nil {
		return provider.Malformed(p, "malformed response JSON: %s", Clip(err.Error(), 200))
	}
	return nil
}
