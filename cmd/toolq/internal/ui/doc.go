// Package ui is toolq's web console: `toolq ui`, and `toolq dev`'s.
//
// # Pages
//
// Server-rendered html/template pages and one small script, embedded
// (embed.FS), no frontend build: jobs (from the newest window of the
// events stream, by tenant, tool, session and status, each with its event
// timeline and result), code-mode runs (the runs bucket), exec approvals
// with the whole plan, dead letters (inspect, requeue, purge), schedules
// (add, pause, resume, remove) and provider breakers. The dead-letter and
// queue work is package operator's, shared with `toolq dlq` and `jobs ls`.
//
// # Live updates
//
// The console subscribes to every tenant's event subjects, the dead-letter
// subjects and the breaker announcements, and serves them as server-sent
// events at /live, filtered on the server by tenant, session, tool, job
// and kind.
//
// # Approvals
//
// The page signs a decision with the operator's own approver nkey seed
// (WebCrypto Ed25519), which never reaches the server; the server checks
// that the decision answers exactly the pending approval it names and
// submits it as an exec.decide job of the approval's tenant, as `toolq
// approve` does. The exec worker alone decides whether the key may decide.
//
// # Access
//
// Loopback by default (and then only a loopback Host is answered); any
// other address needs a token of at least MinTokenBytes, which a browser
// trades for an HttpOnly cookie at /login. Requests that change state must
// be same-origin and carry the page's CSRF token. The console connects
// with the toolq account's credentials and shows every tenant, each item's
// tenant taken from its subject or key.
package ui
