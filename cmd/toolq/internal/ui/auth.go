package ui

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// cookieName is the console's session cookie: an HMAC of the token, so
// the token itself is never stored in the browser.
const cookieName = "toolq_console"

// guard is the console's access control around every handler:
//
//   - Host: on a loopback address the Host header must name a loopback
//     host, so a page of another site cannot reach the console through a
//     DNS name rebound to 127.0.0.1.
//   - Token (when configured): the session cookie the login form sets, or
//     Authorization: Bearer <token>; a browser without either is sent to
//     the login form, anything else gets 401.
//   - CSRF: a request that changes state (not GET or HEAD) must be
//     same-origin (Origin and Sec-Fetch-Site, when the browser sends them)
//     and carry the page's CSRF token (form field csrf or header
//     X-CSRF-Token).
type guard struct {
	token    string
	session  string // the cookie's value for token
	csrf     string
	loopback bool
}

func newGuard(token, csrfSecret string, loopback bool) *guard {
	g := &guard{token: token, loopback: loopback}
	if token != "" {
		g.session = mac(token, "toolq console session")
	}
	g.csrf = mac(csrfSecret, "toolq console csrf")
	return g
}

func mac(key, msg string) string {
	h := hmac.New(sha256.New, []byte(key))
	h.Write([]byte(msg))
	return hex.EncodeToString(h.Sum(nil))
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

func (g *guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin") // no-referrer would make a form's Origin "null"
		h.Set("X-Frame-Options", "DENY")
		if g.loopback && !loopbackHost(r.Host) {
			http.Error(w, "this console answers only to a loopback host name (127.0.0.1, localhost, [::1])", http.StatusMisdirectedRequest)
			return
		}
		if r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/static/") {
			if r.Method != http.MethodGet && r.Method != http.MethodHead && !g.sameOrigin(r) {
				http.Error(w, "cross-origin request refused", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if !g.authorized(r) {
			if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			h.Set("WWW-Authenticate", `Bearer realm="toolq console"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if !g.sameOrigin(r) {
				http.Error(w, "cross-origin request refused", http.StatusForbidden)
				return
			}
			tok := r.Header.Get("X-CSRF-Token")
			if tok == "" {
				tok = r.PostFormValue("csrf")
			}
			if !equal(tok, g.csrf) {
				http.Error(w, "missing or wrong CSRF token: reload the page", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// authorized reports whether r carries the token (or no token is needed).
func (g *guard) authorized(r *http.Request) bool {
	if g.token == "" {
		return true
	}
	if c, err := r.Cookie(cookieName); err == nil && equal(c.Value, g.session) {
		return true
	}
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return equal(bearer, g.token)
	}
	return false
}

// sameOrigin refuses what a browser marks as coming from another origin.
// A client that sends neither header (curl) is no browser: it has no
// ambient credentials a page could borrow.
func (g *guard) sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

// login checks a token typed into the login form and sets the session
// cookie.
func (g *guard) login(w http.ResponseWriter, r *http.Request) bool {
	if g.token == "" || !equal(strings.TrimSpace(r.PostFormValue("token")), g.token) {
		return false
	}
	http.SetCookie(w, &http.Cookie{ //nolint:gosec // G124: HttpOnly and SameSite=Strict are set; Secure needs TLS, which is in front of the console when there is any
		Name: cookieName, Value: g.session, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, Expires: time.Now().Add(12 * time.Hour),
	})
	return true
}

func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	return Loopback(host)
}
