package ui

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/cmd/toolq/internal/operator"
	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/tools/codeexec"
)

// post sends a form (or JSON when body starts with "{") to the console as
// its own page would, and returns the status and body; redirects are not
// followed.
func (b *bundle) post(t *testing.T, path, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(testutil.Context(t, 20*time.Second), http.MethodPost, b.url+path, strings.NewReader(body))
	require.NoError(t, err)
	if strings.HasPrefix(body, "{") {
		req.Header.Set("Content-Type", "application/json")
	} else {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Origin", strings.TrimSuffix(b.url, "/"))
	req.Header.Set("X-CSRF-Token", b.console.guard.csrf)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(data), resp.Header
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(data)
}

// TestDecideRelaysOnlyWhatItShould: the decide endpoint passes on a
// decision only when it answers exactly the pending approval it names,
// signed by the key it names; the rest is refused before the bus.
func TestDecideRelaysOnlyWhatItShould(t *testing.T) {
	t.Parallel()
	b := setup(t, &Config{SeedHint: "/home/op/.toolq/dev/approver.seed"})
	id := b.pendingExec(t, "uname -r")
	page := body(t, get(t, b.url+"approvals"))
	require.Contains(t, page, `id="approval-`+id+`"`)
	require.Contains(t, page, "<code>/home/op/.toolq/dev/approver.seed</code>", "dev says where its seed is")
	rec, err := b.p.Approval(testutil.Context(t, 5*time.Second), id)
	require.NoError(t, err)
	sign := func(mut func(*contracts.ExecDecision)) string {
		d := shell.NewDecision(&rec.Approval, shell.Approve, false, "", time.Now())
		if mut != nil {
			mut(&d)
		}
		d, err := shell.SignDecision(d, []byte(b.seed))
		require.NoError(t, err)
		data, err := json.Marshal(contracts.ExecDecideInput{Decision: d})
		require.NoError(t, err)
		return string(data)
	}
	for name, tc := range map[string]struct {
		body string
		code int
		msg  string
	}{
		"another plan":   {sign(func(d *contracts.ExecDecision) { d.Hash = strings.Repeat("0", 64) }), http.StatusConflict, "reload the page"},
		"unknown":        {sign(func(d *contracts.ExecDecision) { d.ApprovalID = "nope" }), http.StatusNotFound, "unknown or expired"},
		"another tenant": {sign(func(d *contracts.ExecDecision) { d.Tenant = "ACME" }), http.StatusNotFound, "of tenant ACME is unknown"},
		"always denied":  {strings.Replace(sign(nil), `"verdict":"approve"`, `"verdict":"deny","always":true`, 1), http.StatusBadRequest, "always goes with approve only"},
		"tampered":       {strings.Replace(sign(nil), `"verdict":"approve"`, `"verdict":"deny"`, 1), http.StatusBadRequest, "does not verify"},
		"unknown fields": {`{"decision":{},"seed":"SU"}`, http.StatusBadRequest, "unknown field"},
	} {
		code, out, _ := b.post(t, "approvals/decide", tc.body)
		require.Equal(t, tc.code, code, "%s: %s", name, out)
		require.Contains(t, out, tc.msg, name)
	}
	rec, err = b.p.Approval(testutil.Context(t, 5*time.Second), id)
	require.NoError(t, err)
	require.Equal(t, contracts.ExecApprovalPending, rec.Status, "nothing was decided")

	// The right one is relayed, and answers with the exec job's outcome.
	code, out, _ := b.post(t, "approvals/decide", sign(nil))
	require.Equal(t, http.StatusOK, code, out)
	var rep decideReply
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.True(t, rep.OK, out)
	require.True(t, rep.Applied)
	require.Equal(t, contracts.ExecApprovalApproved, rep.Status)
	require.Equal(t, id, rep.JobID)
	// Once only.
	code, out, _ = b.post(t, "approvals/decide", sign(nil))
	require.Equal(t, http.StatusConflict, code, out)
	require.Contains(t, out, "already approved")
}

// TestDecideAlways: the page shows what approving always adds; the
// console relays an always-decision of the default tenant signed by the
// approver's key, the command runs, and the same command then runs
// without approval. An always that would add nothing is refused.
func TestDecideAlways(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testutil.Context(t, 30*time.Second)
	id := b.pendingExec(t, "uname -r")
	page := body(t, get(t, b.url+"approvals"))
	require.Contains(t, page, `<ul class="always-entries"><li><code>&#39;/usr/bin/uname&#39; -r</code></li></ul>`, "the exact entry the allowlist gains")
	require.Contains(t, page, "I add exactly this entry to the fleet-wide allowlist")
	require.Contains(t, page, `class="approve-always" data-verdict="approve" data-always="true" disabled`, "off until confirmed")

	rec, err := b.p.Approval(ctx, id)
	require.NoError(t, err)
	d, err := shell.SignDecision(shell.NewDecision(&rec.Approval, shell.Approve, true, "", time.Now()), []byte(b.seed))
	require.NoError(t, err)
	data, err := json.Marshal(contracts.ExecDecideInput{Decision: d})
	require.NoError(t, err)
	code, out, _ := b.post(t, "approvals/decide", string(data))
	require.Equal(t, http.StatusOK, code, out)
	var rep decideReply
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	require.True(t, rep.OK, out)
	require.Equal(t, contracts.ExecApprovalApproved, rep.Status)
	ev, err := b.p.Await(ctx, "agent", id, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)

	// The same command runs at once; another argument still asks.
	job, err := b.p.SubmitExec(ctx, &contracts.ExecInput{Command: "uname -r"}, nil)
	require.NoError(t, err)
	ev, err = b.p.Await(ctx, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "allowlisted by the always-decision")
	b.pendingExec(t, "uname -a") // waits for approval: only the exact argv was added

	// A wrapper is never allowlisted: always would add nothing.
	rec, err = b.p.Approval(ctx, b.pendingExec(t, "env uname -r"))
	require.NoError(t, err)
	require.Empty(t, shell.AlwaysEntries(shell.Policy{}, &rec.Approval.Plan).Entries)
	d, err = shell.SignDecision(shell.NewDecision(&rec.Approval, shell.Approve, true, "", time.Now()), []byte(b.seed))
	require.NoError(t, err)
	data, err = json.Marshal(contracts.ExecDecideInput{Decision: d})
	require.NoError(t, err)
	code, out, _ = b.post(t, "approvals/decide", string(data))
	require.Equal(t, http.StatusBadRequest, code, out)
	require.Contains(t, out, "would add nothing")
}

func TestSchedulesAddAndRemove(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	form := url.Values{"tool": {"noop"}, "input": {`{"tick":1}`}, "kind": {"every"}, "spec": {"1h"}, "id": {"hourly"}}
	code, out, hdr := b.post(t, "schedules/add", form.Encode())
	require.Equal(t, http.StatusSeeOther, code, out)
	require.Equal(t, "/schedules?done=scheduled&id=hourly&n=0", hdr.Get("Location"))
	page := body(t, get(t, b.url+"schedules?done=scheduled&id=hourly&n=0"))
	require.Contains(t, page, "added schedule hourly")
	require.Contains(t, page, `<td data-label="Id">hourly</td>`)
	list, err := b.console.sched.List(testutil.Context(t, 5*time.Second))
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.JSONEq(t, `{"tick":1}`, string(list[0].Schedule.Job.Input))

	form.Set("input", "{not json")
	code, out, _ = b.post(t, "schedules/add", form.Encode())
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, out, "not valid JSON")

	code, out, _ = b.post(t, "schedules/pause", url.Values{"id": {"hourly"}}.Encode())
	require.Equal(t, http.StatusSeeOther, code, out)
	require.Contains(t, body(t, get(t, b.url+"schedules")), `<span class="status s-pending">paused</span>`)
	in, err := b.console.sched.Get(testutil.Context(t, 5*time.Second), "hourly")
	require.NoError(t, err)
	require.True(t, in.Paused)
	code, out, _ = b.post(t, "schedules/pause", url.Values{"id": {"hourly"}, "resume": {"1"}}.Encode())
	require.Equal(t, http.StatusSeeOther, code, out)
	in, err = b.console.sched.Get(testutil.Context(t, 5*time.Second), "hourly")
	require.NoError(t, err)
	require.False(t, in.Paused)

	code, out, _ = b.post(t, "schedules/remove", url.Values{"id": {"hourly"}}.Encode())
	require.Equal(t, http.StatusSeeOther, code, out)
	list, err = b.console.sched.List(testutil.Context(t, 5*time.Second))
	require.NoError(t, err)
	require.Empty(t, list)
}

func TestPurgeAndPages(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	first := b.deadLetter(t)
	second := b.deadLetter(t)
	page := body(t, get(t, b.url+"dlq?tool=flaky"))
	require.Contains(t, page, first)
	require.Contains(t, page, second)
	show := get(t, b.url+"dlq/show?seq=1")
	require.Equal(t, http.StatusOK, show.StatusCode)
	require.Contains(t, body(t, show), "flaky: the backend is down")

	code, out, hdr := b.post(t, "dlq/purge", url.Values{"seq": {"1"}}.Encode())
	require.Equal(t, http.StatusSeeOther, code, out)
	require.Contains(t, hdr.Get("Location"), "done=purged")
	page = body(t, get(t, b.url+"dlq"))
	require.NotContains(t, page, first)
	require.Contains(t, page, second)
	code, out, _ = b.post(t, "dlq/purge", url.Values{"tool": {"flaky"}}.Encode())
	require.Equal(t, http.StatusSeeOther, code, out)
	require.Contains(t, body(t, get(t, b.url+"dlq")), "No dead letters.")

	// Every page renders, filters are checked.
	for _, p := range []string{"jobs", "runs", "approvals", "dlq", "schedules", "breakers", "jobs?tenant=.&status=completed"} {
		resp := get(t, b.url+p)
		require.Equal(t, http.StatusOK, resp.StatusCode, p)
	}
	for _, p := range []string{"jobs?tenant=a.b", "jobs?status=done", "dlq?session=a%20b", "job?session=s", "live?kind=other"} {
		resp := get(t, b.url+p)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, p)
	}
}

// TestRunsPage: a code-mode run suspended on a nested call (a sleep that
// outlasts the test) is on the runs page with its pending call, and its
// page has its output so far.
func TestRunsPage(t *testing.T) {
	t.Parallel()
	b := setupWith(t, &options{codeMode: true})
	ctx := testutil.Context(t, 30*time.Second)
	run, err := b.p.SubmitCode(ctx, &contracts.CodeModeExecInput{
		Code: `text("before the call"); await tools.callValue("toolq:core:sleep", {ms: 30000}); return 1;`, AutoResume: true,
	}, nil)
	require.NoError(t, err)
	ev, err := b.p.Await(ctx, run.Session, run.ID, &producer.AwaitOpts{Parked: true})
	require.NoError(t, err)
	require.Equal(t, contracts.StatusWaiting, ev.Data.Status)
	page := body(t, get(t, b.url+"runs?session=agent"))
	require.Contains(t, page, run.ID)
	require.Contains(t, page, `<td data-label="Session">agent</td><td data-label="Pending calls">1</td><td data-label="Results back">0</td><td data-label="Suspensions">1</td>`,
		"one pending call, no result back, one suspension")
	job := body(t, get(t, b.url+"job?session=agent&id="+run.ID))
	require.Contains(t, job, "Result so far")
	require.Contains(t, job, "before the call")
	require.NotContains(t, body(t, get(t, b.url+"runs?tenant=ACME")), run.ID, "another tenant's filter")
}

// TestDecideForTenants: a named tenant's approval is decided on that
// tenant's decide subject, and only by that tenant's approver: the
// default tenant's approver and another tenant's are refused by the exec
// worker, and a decision naming another tenant finds no approval there.
func TestDecideForTenants(t *testing.T) {
	t.Parallel()
	b := setupWith(t, &options{tenants: []string{"ACME", "GLOBEX"}})
	ctx := testutil.Context(t, 30*time.Second)
	job, last := b.pendingTenantExec(t, "ACME", "uname -m")

	page := body(t, get(t, b.url+"approvals?tenant=ACME"))
	require.Contains(t, page, `data-tenant="ACME"`)
	require.Contains(t, page, `class="approve"`, "a tenant's approval can be decided here")
	require.NotContains(t, body(t, get(t, b.url+"approvals?tenant=GLOBEX")), job.ID)

	rec, err := b.console.approval(ctx, "ACME", job.ID)
	require.NoError(t, err)
	require.Equal(t, "ACME", rec.Approval.Tenant)
	decide := func(seed string, mut func(*contracts.ExecDecision)) (int, decideReply) {
		t.Helper()
		d := shell.NewDecision(&rec.Approval, shell.Approve, false, "", time.Now())
		if mut != nil {
			mut(&d)
		}
		d, err := shell.SignDecision(d, []byte(seed))
		require.NoError(t, err)
		data, err := json.Marshal(contracts.ExecDecideInput{Decision: d})
		require.NoError(t, err)
		code, out, _ := b.post(t, "approvals/decide", string(data))
		var rep decideReply
		require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
		return code, rep
	}
	for name, seed := range map[string]string{"the default tenant's approver": b.seed, "GLOBEX's approver": b.tenantSeeds["GLOBEX"]} {
		code, rep := decide(seed, nil)
		require.Equal(t, http.StatusOK, code, name)
		require.False(t, rep.OK, name)
		require.Equal(t, contracts.CodeDenied, rep.Error.Code, "%s: %s", name, rep.Error.Message)
	}
	// always changes the allowlist every tenant shares: not for a tenant.
	require.NotContains(t, page, "approve-always", "no always for a tenant's approval")
	d := shell.NewDecision(&rec.Approval, shell.Approve, true, "", time.Now())
	d, err = shell.SignDecision(d, []byte(b.tenantSeeds["ACME"]))
	require.NoError(t, err)
	data, err := json.Marshal(contracts.ExecDecideInput{Decision: d})
	require.NoError(t, err)
	hc, out, _ := b.post(t, "approvals/decide", string(data))
	require.Equal(t, http.StatusBadRequest, hc, out)
	require.Contains(t, out, "for the default tenant's approvers only")
	require.Equal(t, contracts.StatusApprovalPending, last(), "nothing ran")

	code, rep := decide(b.tenantSeeds["GLOBEX"], func(d *contracts.ExecDecision) { d.Tenant = "GLOBEX" })
	require.Equal(t, http.StatusNotFound, code, "GLOBEX has no approval %s: %+v", job.ID, rep)
	require.Equal(t, contracts.StatusApprovalPending, last(), "nothing ran")

	code, rep = decide(b.tenantSeeds["ACME"], nil)
	require.Equal(t, http.StatusOK, code)
	require.True(t, rep.OK, "%+v", rep.Error)
	require.Equal(t, contracts.ExecApprovalApproved, rep.Status)
	require.Eventually(t, func() bool { return last() == contracts.StatusCompleted }, 20*time.Second, 20*time.Millisecond)
}

// pendingTenantExec publishes command as an exec job of tenant (from the
// toolq account, as the tenant's import would put it) and returns it once
// it waits for approval, with a reader of its last status.
func (b *bundle) pendingTenantExec(t *testing.T, tenant, command string) (*contracts.Job, func() contracts.Status) {
	t.Helper()
	ctx := testutil.Context(t, 30*time.Second)
	js := testutil.JetStream(t, b.nc)
	events, err := bus.NewEvents(ctx, js, contracts.Subjects{})
	require.NoError(t, err)
	input, err := json.Marshal(contracts.ExecInput{Command: command})
	require.NoError(t, err)
	job := &contracts.Job{ID: strings.ToLower(tenant) + "-exec", Tool: contracts.ToolExec, Session: "agent", Input: input, Tenant: tenant}
	_, _, err = operator.PublishJob(ctx, js, contracts.Subjects{}, job)
	require.NoError(t, err)
	last := func() contracts.Status {
		ev, _, err := events.LastIn(ctx, tenant, "agent", job.ID)
		require.NoError(t, err)
		if ev == nil {
			return ""
		}
		return ev.Data.Status
	}
	require.Eventually(t, func() bool { return last() == contracts.StatusApprovalPending }, 10*time.Second, 20*time.Millisecond)
	return job, last
}

// TestBreakersFeed: a breaker change a worker announces (the CloudEvent of
// `toolq worker`'s OnBreakerChange) is in the breaker feed (the page
// itself reads the breakers bucket: TestBreakersPage).
func TestBreakersFeed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := testutil.Context(t, 10*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url+"live?kind=breaker", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	require.True(t, lines.Scan(), "the feed is open")

	change := codeexec.BreakerChange{Provider: "xai", Model: "grok-4", From: codeexec.BreakerClosed, To: codeexec.BreakerOpen, At: time.Now().UTC()}
	data, err := json.Marshal(map[string]any{"specversion": "1.0", "type": "toolq.provider.breaker_changed", "time": change.At, "data": change})
	require.NoError(t, err)
	require.NoError(t, b.nc.Publish(contracts.Subjects{}.Breaker("xai"), data))
	for lines.Scan() {
		if item, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
			require.Contains(t, item, `"kind":"breaker"`)
			require.Contains(t, item, `"model":"grok-4"`)
			require.Contains(t, item, `"status":"open"`)
			break
		}
	}
}
