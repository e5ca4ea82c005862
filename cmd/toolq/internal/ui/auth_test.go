package ui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

func TestRemoteListenNeedsAToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		listen, token, err string
	}{
		{listen: "0.0.0.0:0", err: "not a loopback address"},
		{listen: "192.0.2.1:8470", err: "not a loopback address"},
		{listen: "[::]:0", err: "not a loopback address"},
		{listen: "0.0.0.0:0", token: "short", err: "at least 16 bytes"},
		{listen: "127.0.0.1:0"},
		{listen: "localhost:0"},
		{listen: "[::1]:0"},
		{listen: "8470"},
		{listen: "0.0.0.0:0", token: "a-token-of-at-least-16-bytes"}, //nolint:gosec // G101: a test token
	} {
		c, err := Config{Listen: tc.listen, Token: tc.token}.withDefaults()
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, "%+v", tc)
			require.ErrorIs(t, err, &contracts.Error{Code: contracts.CodeInvalidInput})
			continue
		}
		require.NoError(t, err, "%+v", tc)
		require.NotEmpty(t, c.Listen)
	}
	c, err := Config{Listen: "8470"}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:8470", c.Listen, "a bare port binds loopback")
	_, err = New(nil, &Config{Listen: "0.0.0.0:0"})
	require.ErrorContains(t, err, "not a loopback address", "New refuses before it touches the bus")
}

// guarded is a console handler with the guard of token (loopback when
// token is empty) around a handler that answers 200.
func guarded(t *testing.T, token string) (http.Handler, *guard) {
	t.Helper()
	g := newGuard(token, "secret", token == "")
	return g.wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })), g
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestTokenAuth(t *testing.T) {
	t.Parallel()
	const token = "the-console-token-0123"
	h, g := guarded(t, token)

	// No token: an API client gets 401, a browser the login form.
	r := httptest.NewRequest(http.MethodGet, "http://console.example:8470/jobs", nil)
	require.Equal(t, http.StatusUnauthorized, serve(h, r).Code)
	r.Header.Set("Accept", "text/html")
	w := serve(h, r)
	require.Equal(t, http.StatusSeeOther, w.Code)
	require.Equal(t, "/login?next=%2Fjobs", w.Header().Get("Location"))

	// A wrong bearer token, a wrong cookie: 401.
	r = httptest.NewRequest(http.MethodGet, "http://console.example:8470/jobs", nil)
	r.Header.Set("Authorization", "Bearer not-the-console-token")
	require.Equal(t, http.StatusUnauthorized, serve(h, r).Code)
	r = httptest.NewRequest(http.MethodGet, "http://console.example:8470/jobs", nil)
	r.AddCookie(&http.Cookie{Name: cookieName, Value: token}) //nolint:gosec // G124: a forged cookie the guard must refuse
	require.Equal(t, http.StatusUnauthorized, serve(h, r).Code, "the cookie is a MAC of the token, not the token")

	// The right bearer token.
	r = httptest.NewRequest(http.MethodGet, "http://console.example:8470/jobs", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	require.Equal(t, http.StatusOK, serve(h, r).Code)

	// The login form: a wrong token sets no cookie, the right one does,
	// and the cookie opens the pages.
	login := func(tok string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "http://console.example:8470/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Origin", "http://console.example:8470")
		w := httptest.NewRecorder()
		if g.login(w, r) {
			w.WriteHeader(http.StatusSeeOther)
		} else {
			w.WriteHeader(http.StatusUnauthorized)
		}
		return w
	}
	w = login("wrong-token-of-some-length")
	require.Equal(t, http.StatusUnauthorized, w.Code)
	require.Empty(t, w.Result().Cookies())
	w = login(token)
	cookies := w.Result().Cookies()
	require.Len(t, cookies, 1)
	require.True(t, cookies[0].HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookies[0].SameSite)
	require.NotContains(t, cookies[0].Value, token)
	r = httptest.NewRequest(http.MethodGet, "http://console.example:8470/jobs", nil)
	r.AddCookie(cookies[0])
	require.Equal(t, http.StatusOK, serve(h, r).Code)
}

func TestCSRF(t *testing.T) {
	t.Parallel()
	h, g := guarded(t, "")
	post := func(csrf, origin, site string) int {
		form := url.Values{"seq": {"1"}}
		if csrf != "" {
			form.Set("csrf", csrf)
		}
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8470/dlq/purge", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if site != "" {
			r.Header.Set("Sec-Fetch-Site", site)
		}
		return serve(h, r).Code
	}
	require.Equal(t, http.StatusOK, post(g.csrf, "http://127.0.0.1:8470", "same-origin"))
	require.Equal(t, http.StatusForbidden, post("", "http://127.0.0.1:8470", "same-origin"), "no CSRF token")
	require.Equal(t, http.StatusForbidden, post("0123", "http://127.0.0.1:8470", "same-origin"), "a wrong CSRF token")
	require.Equal(t, http.StatusForbidden, post(g.csrf, "http://evil.example", "cross-site"), "another site's page, even with the token")
	require.Equal(t, http.StatusForbidden, post(g.csrf, "http://127.0.0.1:9999", ""), "another origin")
	require.Equal(t, http.StatusForbidden, post(g.csrf, "", "same-site"), "a sibling site")

	// The header works for fetch, as the approvals page sends it.
	r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8470/approvals/decide", strings.NewReader(`{}`))
	r.Header.Set("X-CSRF-Token", g.csrf)
	r.Header.Set("Origin", "http://127.0.0.1:8470")
	require.Equal(t, http.StatusOK, serve(h, r).Code)

	// GETs change nothing and need no token.
	require.Equal(t, http.StatusOK, serve(h, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8470/dlq", nil)).Code)
}

// TestLoopbackHostOnly: on a loopback address only a loopback Host is
// answered, so a page of a rebound DNS name cannot read the console.
func TestLoopbackHostOnly(t *testing.T) {
	t.Parallel()
	h, _ := guarded(t, "")
	for host, code := range map[string]int{
		"127.0.0.1:8470": http.StatusOK, "localhost:8470": http.StatusOK, "[::1]:8470": http.StatusOK,
		"rebound.example:8470": http.StatusMisdirectedRequest, "192.0.2.1:8470": http.StatusMisdirectedRequest,
	} {
		r := httptest.NewRequest(http.MethodGet, "http://"+host+"/jobs", nil)
		require.Equal(t, code, serve(h, r).Code, host)
	}
}

func TestSafeNext(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/dlq?tool=x": "/dlq?tool=x", "": "/jobs", "//evil.example/": "/jobs", "https://evil.example/": "/jobs",
		"/\\evil.example": "/jobs", "jobs": "/jobs",
	} {
		require.Equal(t, want, safeNext(in), in)
	}
}
