package providertest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/tools/codeexec/provider"
)

// Scenario is the canonical answer the suite asks a Harness to encode: text
// blocks (joined in order), one executed code block and its output, and
// citations.
type Scenario struct {
	Texts        []string
	Code         string
	Output       string
	Citations    []string
	InputTokens  int64
	OutputTokens int64
}

// Canonical is the scenario of the code_execution contract's multi-block test.
var Canonical = Scenario{
	Texts:  []string{"Mean: ", "42", ". Verified."},
	Code:   "import statistics\nprint(statistics.mean([40, 42, 44]))",
	Output: "42\n",
	Citations: []string{
		"https://example.com/input.csv",
		"https://example.com/result.csv",
		"https://example.com/input.csv",
	},
	InputTokens:  120,
	OutputTokens: 35,
}

// Harness describes one provider to the suite.
type Harness struct {
	// Name is the provider name.
	Name string
	// New returns the client under test for baseURL.
	New func(baseURL string, hc *http.Client, log *slog.Logger) provider.Client
	// Path is the request path the client must use for model.
	Path func(model string) string
	// APIKey extracts the API key from a request.
	APIKey func(r *http.Request) string
	// Answer encodes s as a successful response body.
	Answer func(s Scenario) []byte
	// NoText is a successful response body without answer text.
	NoText []byte
	// ErrorBody encodes an error response with message msg.
	ErrorBody func(status int, msg string) []byte
	// Model is a model id to request.
	Model string
}

// Server is a local provider server recording what it received.
type Server struct {
	*httptest.Server
	mu       sync.Mutex
	requests []Request
	handler  http.HandlerFunc
}

// Request is one request a Server received.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// NewServer starts a server answering with h (after recording the request),
// closed when the test ends.
func NewServer(tb testing.TB, h http.HandlerFunc) *Server {
	tb.Helper()
	s := &Server{handler: h}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
		s.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.handler(w, r)
	}))
	tb.Cleanup(s.Close)
	return s
}

// Requests returns what the server received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// JSON answers every request with status and body.
func JSON(status int, body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}
}

// Drop closes the connection without answering.
func Drop(tb testing.TB) http.HandlerFunc {
	tb.Helper()
	return func(w http.ResponseWriter, _ *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			tb.Error("response writer cannot hijack")
			return
		}
		conn, _, err := hj.Hijack()
		if err != nil {
			tb.Error(err)
			return
		}
		_ = conn.Close()
	}
}

// lockedBuffer is a goroutine-safe log sink.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestKey is the API key the suite sends. It looks like a real key so that
// the pattern-based redaction is exercised too.
const TestKey = "test-secret-key-0123456789"

const task = "Compute the mean of 40, 42 and 44."

func execute(t *testing.T, h Harness, base string, log *slog.Logger) (*provider.Response, error) {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := h.New(base, client(t), log)
	require.Equal(t, h.Name, c.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Execute(ctx, &provider.Request{Task: task, Model: h.Model, APIKey: TestKey})
}

// client is an HTTP client of the test's own: every httptest.Server's Close
// drops the idle connections of http.DefaultTransport, which broke another
// parallel test's exchange on the shared transport now and then.
func client(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func requireKind(t *testing.T, err error, kind provider.Kind) *provider.Error {
	t.Helper()
	require.Error(t, err)
	var pe *provider.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, kind, pe.Kind, "error: %v", err)
	require.NotEmpty(t, pe.Provider)
	return pe
}

// Run runs the suite against h.
func Run(t *testing.T, h Harness) {
	t.Helper()

	t.Run("answer", func(t *testing.T) {
		t.Parallel()
		srv := NewServer(t, JSON(200, h.Answer(Canonical)))
		resp, err := execute(t, h, srv.URL, nil)
		require.NoError(t, err)
		require.Equal(t, "Mean: 42. Verified.", resp.Content)
		require.Equal(t, []string{"https://example.com/input.csv", "https://example.com/result.csv"}, resp.Citations)
		require.True(t, resp.UsedCodeExecution)
		require.Len(t, resp.Runs, 1)
		require.Equal(t, Canonical.Code, resp.Runs[0].Code)
		require.Equal(t, Canonical.Output, resp.Runs[0].Output)
		require.Equal(t, provider.OutcomeOK, resp.Runs[0].Outcome)
		require.NotEmpty(t, resp.OutputTypes)
		require.NotEmpty(t, resp.Model)
		require.Equal(t, Canonical.InputTokens, resp.Usage.InputTokens)
		require.Equal(t, Canonical.OutputTokens, resp.Usage.OutputTokens)
		require.Equal(t, int64(1), resp.Usage.ToolCalls)

		reqs := srv.Requests()
		require.Len(t, reqs, 1)
		require.Equal(t, http.MethodPost, reqs[0].Method)
		require.Equal(t, h.Path(h.Model), reqs[0].Path)
		r := &http.Request{Header: reqs[0].Header}
		require.Equal(t, TestKey, h.APIKey(r))
		require.Contains(t, string(reqs[0].Body), task)
		require.Equal(t, "application/json", reqs[0].Header.Get("Content-Type"))
	})

	t.Run("base URL path prefix", func(t *testing.T) {
		t.Parallel()
		srv := NewServer(t, JSON(200, h.Answer(Canonical)))
		_, err := execute(t, h, srv.URL+"/proxy/", nil)
		require.NoError(t, err)
		require.Equal(t, "/proxy"+h.Path(h.Model), srv.Requests()[0].Path)
	})

	statuses := []struct {
		status int
		kind   provider.Kind
	}{
		{400, provider.KindBadRequest},
		{401, provider.KindAuth},
		{403, provider.KindAuth},
		{404, provider.KindBadRequest},
		{429, provider.KindRateLimited},
		{500, provider.KindServer},
		{502, provider.KindServer},
		{503, provider.KindServer},
	}
	for _, tc := range statuses {
		t.Run("status "+http.StatusText(tc.status), func(t *testing.T) {
			t.Parallel()
			srv := NewServer(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Retry-After", "7")
				w.WriteHeader(tc.status)
				_, _ = w.Write(h.ErrorBody(tc.status, "the provider says no"))
			})
			_, err := execute(t, h, srv.URL, nil)
			pe := requireKind(t, err, tc.kind)
			require.Equal(t, tc.status, pe.Status)
			require.Contains(t, pe.Message, "the provider says no")
			require.Equal(t, 7*time.Second, pe.RetryAfter)
			require.Equal(t, tc.kind == provider.KindRateLimited || tc.kind == provider.KindServer, pe.Retryable())
			require.Equal(t, tc.kind == provider.KindServer, pe.Fault())
		})
	}

	malformed := map[string]string{
		"truncated JSON": `{"output": [`,
		"not an object":  `[1, 2, 3]`,
		"empty":          ``,
		"html":           `<html>bad gateway</html>`,
		"wrong types":    `{"output": 7, "candidates": 7, "content": 7}`,
	}
	for name, body := range malformed {
		t.Run("malformed "+name, func(t *testing.T) {
			t.Parallel()
			srv := NewServer(t, JSON(200, []byte(body)))
			_, err := execute(t, h, srv.URL, nil)
			pe := requireKind(t, err, provider.KindMalformed)
			require.True(t, pe.Fault())
			require.False(t, pe.Retryable())
		})
	}

	t.Run("no answer text", func(t *testing.T) {
		t.Parallel()
		srv := NewServer(t, JSON(200, h.NoText))
		_, err := execute(t, h, srv.URL, nil)
		pe := requireKind(t, err, provider.KindNoAnswer)
		require.Equal(t, provider.NoAnswerMessage, pe.Message)
		require.ErrorIs(t, err, provider.ErrNoAnswer)
	})

	t.Run("dropped connection", func(t *testing.T) {
		t.Parallel()
		srv := NewServer(t, Drop(t))
		_, err := execute(t, h, srv.URL, nil)
		pe := requireKind(t, err, provider.KindTransport)
		require.True(t, pe.Retryable())
		require.NotContains(t, err.Error(), TestKey)
	})

	t.Run("cancelled", func(t *testing.T) {
		t.Parallel()
		arrived := make(chan struct{})
		srv := NewServer(t, func(_ http.ResponseWriter, r *http.Request) {
			close(arrived)
			<-r.Context().Done()
		})
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := h.New(srv.URL, client(t), nil).Execute(ctx, &provider.Request{Task: task, Model: h.Model, APIKey: TestKey})
			errc <- err
		}()
		<-arrived
		cancel()
		err := <-errc
		_ = requireKind(t, err, provider.KindCancelled)
		require.ErrorIs(t, err, context.Canceled)
	})

	t.Run("secrets redacted in logs", func(t *testing.T) {
		t.Parallel()
		var buf lockedBuffer
		log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		// The server echoes the key back, as some error bodies do.
		srv := NewServer(t, JSON(401, h.ErrorBody(401, "invalid key "+TestKey+" and xai-ABCDEFGHIJKLMNOP")))
		_, err := execute(t, h, srv.URL, log)
		_ = requireKind(t, err, provider.KindAuth)
		out := buf.String()
		require.Contains(t, out, "provider request")
		require.Contains(t, out, "provider response")
		require.Contains(t, out, "[REDACTED]")
		require.NotContains(t, out, TestKey)
		require.NotContains(t, out, "xai-ABCDEFGHIJKLMNOP")
		require.NotContains(t, err.Error(), TestKey)
		require.Contains(t, out, "Compute the mean", "the logged request body carries the task")
	})
}
