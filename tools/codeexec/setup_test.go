package codeexec_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/tools/codeexec"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats-server and nats.go keep a few process-wide goroutines.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go.(*Conn).doReconnect"),
		goleak.IgnoreTopFunction("time.Sleep"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).syncBlocks"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"),
	)
}

var quiet = slog.New(slog.DiscardHandler)

// fakeProvider is a local server speaking one provider's wire format; its
// handler can be swapped while the test runs.
type fakeProvider struct {
	name string
	srv  *httptest.Server
	hits atomic.Int32

	mu      sync.Mutex
	handler http.HandlerFunc
	bodies  [][]byte
	headers []http.Header
}

func newFake(t *testing.T, name string) *fakeProvider {
	t.Helper()
	f := &fakeProvider{name: name}
	f.handler = ok(name, "Mean: 42. Verified.")
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.hits.Add(1)
		f.mu.Lock()
		f.bodies = append(f.bodies, body)
		f.headers = append(f.headers, r.Header.Clone())
		h := f.handler
		f.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeProvider) set(h http.HandlerFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handler = h
}

func (f *fakeProvider) lastBody(t *testing.T) map[string]any {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.bodies)
	var m map[string]any
	require.NoError(t, json.Unmarshal(f.bodies[len(f.bodies)-1], &m))
	return m
}

func (f *fakeProvider) lastHeader(t *testing.T) http.Header {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.headers)
	return f.headers[len(f.headers)-1]
}

// okBody is a recorded-shape successful body of provider p answering text.
func okBody(p, text string) []byte {
	var v any
	switch p {
	case codeexec.XAI, codeexec.OpenAI:
		logs := `{"stdout":"42\n","stderr":"","exit_code":0,"command_timed_out":false}`
		if p == codeexec.OpenAI {
			logs = "42\n"
		}
		model := "grok-4.6"
		if p == codeexec.OpenAI {
			model = "gpt-4.1"
		}
		v = map[string]any{
			"id": "resp_1", "model": model, "status": "completed",
			"output": []any{
				map[string]any{
					"type": "code_interpreter_call", "status": "completed", "code": "print(42)",
					"outputs": []any{map[string]any{"type": "logs", "logs": logs}},
				},
				map[string]any{"type": "message", "role": "assistant", "content": []any{
					map[string]any{"type": "output_text", "text": text[:len(text)/2], "annotations": []any{
						map[string]any{"type": "url_citation", "url": "https://example.com/input.csv"},
					}},
					map[string]any{"type": "output_text", "text": text[len(text)/2:], "annotations": []any{
						map[string]any{"type": "url_citation", "url": "https://example.com/result.csv"},
						map[string]any{"type": "url_citation", "url": "https://example.com/input.csv"},
					}},
				}},
			},
			"usage": map[string]any{"input_tokens": 100, "output_tokens": 20, "server_side_tool_usage_details": map[string]any{"code_interpreter_calls": 1}},
		}
	case codeexec.Gemini:
		v = map[string]any{
			"candidates": []any{map[string]any{"content": map[string]any{"role": "model", "parts": []any{
				map[string]any{"executableCode": map[string]any{"language": "PYTHON", "code": "print(42)"}},
				map[string]any{"codeExecutionResult": map[string]any{"outcome": "OUTCOME_OK", "output": "42\n"}},
				map[string]any{"text": text},
			}}, "finishReason": "STOP"}},
			"usageMetadata": map[string]any{"promptTokenCount": 100, "candidatesTokenCount": 20},
			"modelVersion":  "gemini-2.5-flash",
		}
	case codeexec.Anthropic:
		v = map[string]any{
			"model": "claude-sonnet-4-5", "stop_reason": "end_turn",
			"content": []any{
				map[string]any{"type": "server_tool_use", "id": "s1", "name": "bash_code_execution", "input": map[string]any{"command": "python -c 'print(42)'"}},
				map[string]any{"type": "bash_code_execution_tool_result", "tool_use_id": "s1", "content": map[string]any{"type": "bash_code_execution_result", "stdout": "42\n", "stderr": "", "return_code": 0, "content": []any{}}},
				map[string]any{"type": "text", "text": text},
			},
			"usage": map[string]any{"input_tokens": 100, "output_tokens": 20},
		}
	}
	b, _ := json.Marshal(v)
	return b
}

func ok(p, text string) http.HandlerFunc {
	body := okBody(p, text)
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}
}

func status(code int, retryAfter string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(code)
		_, _ = w.Write([]byte(`{"error":{"message":"status ` + http.StatusText(code) + `"}}`))
	}
}

func raw(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) }
}

// sequence answers the n-th request with hs[n], repeating the last.
func sequence(hs ...http.HandlerFunc) http.HandlerFunc {
	var n atomic.Int32
	return func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		if i >= len(hs) {
			i = len(hs) - 1
		}
		hs[i](w, r)
	}
}

// changes records breaker changes.
type changes struct {
	mu   sync.Mutex
	list []codeexec.BreakerChange
}

func (c *changes) add(ch codeexec.BreakerChange) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = append(c.list, ch)
}

func (c *changes) transitions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := []string{}
	for _, ch := range c.list {
		out = append(out, ch.Provider+"/"+ch.Model+":"+string(ch.From)+"->"+string(ch.To))
	}
	return out
}

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

// keys are the test API keys; they look like real keys.
var keys = map[string]string{
	codeexec.XAI:       "xai-test-key-1111111111",
	codeexec.OpenAI:    "sk-test-key-2222222222",
	codeexec.Gemini:    "AIza-test-key-3333333333",
	codeexec.Anthropic: "sk-ant-test-key-4444444444",
}

// bundle is what a test needs: the tool, one fake server per provider, the
// breaker changes and the log.
type bundle struct {
	tool    *codeexec.CodeExecution
	fakes   map[string]*fakeProvider
	changes *changes
	logs    *lockedBuffer
	env     map[string]string
}

// setup builds a tool whose four providers point at local servers, with
// keys from config, zero backoff and the given config changes applied.
func setup(t *testing.T, mutate ...func(*codeexec.Config)) *bundle {
	t.Helper()
	b := &bundle{fakes: map[string]*fakeProvider{}, changes: &changes{}, logs: &lockedBuffer{}, env: map[string]string{}}
	cfg := &codeexec.Config{
		Providers:       map[string]*codeexec.ProviderConfig{},
		OnBreakerChange: b.changes.add,
		Getenv:          func(k string) string { return b.env[k] },
		Logger:          slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		NewBackOff:      func() backoff.BackOff { return &backoff.ZeroBackOff{} },
	}
	tr := &http.Transport{}
	cfg.HTTPClient = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	for _, p := range []string{codeexec.XAI, codeexec.OpenAI, codeexec.Gemini, codeexec.Anthropic} {
		f := newFake(t, p)
		b.fakes[p] = f
		cfg.Providers[p] = &codeexec.ProviderConfig{APIKey: keys[p], BaseURL: f.srv.URL}
	}
	for _, m := range mutate {
		m(cfg)
	}
	tool, err := codeexec.NewCodeExecution(cfg)
	require.NoError(t, err)
	b.tool = tool
	return b
}

func job(t *testing.T, input any) *contracts.Job {
	t.Helper()
	in, err := json.Marshal(input)
	require.NoError(t, err)
	return &contracts.Job{ID: "job-1", Tool: "code_execution", Session: "s1", Input: in}
}

func (b *bundle) run(t *testing.T, input any) (*codeexec.Details, *contracts.Error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return b.runCtx(ctx, t, input)
}

func (b *bundle) runCtx(ctx context.Context, t *testing.T, input any) (*codeexec.Details, *contracts.Error) {
	t.Helper()
	out, err := b.tool.Handle(ctx, job(t, input))
	if err != nil {
		var ce *contracts.Error
		require.ErrorAs(t, err, &ce)
		require.Nil(t, out)
		return nil, ce
	}
	var d codeexec.Details
	require.NoError(t, json.Unmarshal(out, &d))
	return &d, nil
}

// details decodes a failure's details.
type failure struct {
	Provider     string `json:"provider"`
	Model        string `json:"model"`
	Kind         string `json:"kind"`
	Status       int    `json:"status"`
	RetryAfterMs int64  `json:"retryAfterMs"`
	Attempts     int    `json:"attempts"`
	Failover     []codeexec.FailoverStep
}

func failureOf(t *testing.T, e *contracts.Error) failure {
	t.Helper()
	var f failure
	require.NoError(t, json.Unmarshal(e.Details, &f))
	return f
}
