package transport_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/tools/codeexec/internal/transport"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"1", time.Second},
		{" 2 ", 2 * time.Second},
		{"0.5", 500 * time.Millisecond},
		{"0", 0},
		{"-3", 0},
		{"NaN", 0},
		{"soon", 0},
		{"99999", transport.MaxRetryAfter},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, transport.RetryAfter(tc.in, now), "Retry-After %q", tc.in)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	s := transport.Redact(`{"key":"my-secret-value","other":"xai-0123456789abcdef","g":"AIzaSyA0123456789","o":"sk-proj-abcdefghijk"}`, []string{"my-secret-value", ""})
	require.NotContains(t, s, "my-secret-value")
	require.NotContains(t, s, "xai-0123456789abcdef")
	require.NotContains(t, s, "AIzaSyA0123456789")
	require.NotContains(t, s, "sk-proj-abcdefghijk")
	require.Equal(t, 4, strings.Count(s, "[REDACTED]"))
}

func TestClip(t *testing.T) {
	t.Parallel()
	require.Equal(t, "abc", transport.Clip("abc", 3))
	require.Equal(t, "ab…", transport.Clip("abcd", 2))
	// Never cuts a multi-byte rune.
	require.Equal(t, "a…", transport.Clip("aé", 2))
}

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	require.Equal(t, "bad key", transport.ErrorMessage([]byte(`{"error":{"message":"bad key","type":"x"}}`)))
	require.Equal(t, "bad key", transport.ErrorMessage([]byte(`{"code":"x","error":"bad key"}`)))
	require.Equal(t, "bad key", transport.ErrorMessage([]byte(`{"message":"bad key"}`)))
	require.Equal(t, "<html>", transport.ErrorMessage([]byte(" <html> ")))
}

func TestJoinURL(t *testing.T) {
	t.Parallel()
	require.Equal(t, "http://h/p/v1/x", transport.JoinURL("http://h/p/", "/v1/x"))
	require.Equal(t, "http://h/v1/x", transport.JoinURL("http://h", "v1/x"))
}
