package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/bus"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/worker"
)

// The browser tests drive the console in a real headless Chromium, one
// browser for the whole test binary, one tab a test.
var browser struct {
	once   sync.Once
	ctx    context.Context
	cancel func()
	err    error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if browser.cancel != nil {
		browser.cancel()
	}
	http.DefaultClient.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(
			// nats-server and nats.go keep a few process-wide goroutines.
			goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
			goleak.IgnoreTopFunction("github.com/nats-io/nats.go.(*Conn).doReconnect"),
			goleak.IgnoreTopFunction("time.Sleep"),
			goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).syncBlocks"),
			goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// tab opens a tab of the shared browser. Without chromium on PATH the
// test fails: CI installs it.
func tab(t *testing.T) context.Context {
	t.Helper()
	browser.once.Do(func() {
		path, err := exec.LookPath("chromium")
		if err != nil {
			browser.err = fmt.Errorf("the browser tests need chromium on PATH (apt-get install chromium): %w", err)
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
			chromedp.Flag("disable-dev-shm-usage", true))
		actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
		bctx, bcancel := chromedp.NewContext(actx)
		if err := chromedp.Do(bctx); err != nil {
			bcancel()
			acancel()
			browser.err = fmt.Errorf("start chromium: %w", err)
			return
		}
		browser.ctx, browser.cancel = bctx, func() { bcancel(); acancel() }
	})
	require.NoError(t, browser.err)
	ctx, cancel := chromedp.NewContext(browser.ctx)
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(ctx), "open a tab") // the tab lives as long as ctx: no timeout on this call
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancelTimeout)
	return ctx
}

// waitText polls the page until the text of the element sel contains
// want, and returns it.
func waitText(t *testing.T, ctx context.Context, sel, want string) string {
	t.Helper()
	var got string
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		got, err = chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e ? e.textContent : ""; })()`, sel)))
		require.NoError(t, err)
		if strings.Contains(got, want) {
			return got
		}
		if time.Now().After(deadline) {
			html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.location.href + "\n" + document.body.innerText`))
			require.FailNow(t, "timed out", "%s: %q does not contain %q; page: %s", sel, got, want, html)
		}
		time.Sleep(50 * time.Millisecond) // polling the page (an external system) with a deadline
	}
}

// live opens path and waits for its live feed to be connected.
func live(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#live-state"))))
	_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__stayed = true`))
	require.NoError(t, err)
}

// stayed reports that the page was not reloaded since live.
func stayed(t *testing.T, ctx context.Context) {
	t.Helper()
	ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.__stayed === true`))
	require.NoError(t, err)
	require.True(t, ok, "the page was reloaded")
}

// TestBrowserJobCompletesLive: a job submitted while the jobs page is open
// shows up and turns completed on it, without a reload.
func TestBrowserJobCompletesLive(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := tab(t)
	live(t, ctx, b.url+"jobs")
	job, err := b.p.Submit(testutil.Context(t, 10*time.Second), worker.ToolSleep, json.RawMessage(`{"ms":300}`), &producer.SubmitOpts{Progress: true})
	require.NoError(t, err)
	row := fmt.Sprintf(`tr[data-key="/%s/%s"]`, job.Session, job.ID)
	waitText(t, ctx, row+" td:nth-child(2)", "completed")
	waitText(t, ctx, row+" td:nth-child(3)", "sleep")
	stayed(t, ctx)

	// Its page has the timeline and the result.
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(row+" a")), chromedp.WaitVisible(chromedp.CSS("#timeline"))))
	waitText(t, ctx, "#timeline", "running")
	waitText(t, ctx, "#timeline", "completed")
	waitText(t, ctx, "#job-status", "completed")
}

// TestBrowserApprove: the operator loads their approver seed into the
// approvals page and approves; the page signs, the exec worker accepts it
// and the command runs. A key the worker does not trust is refused by the
// worker, and its command does not run.
func TestBrowserApprove(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := tab(t)
	id := b.pendingExec(t, "uname -s")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.url+"approvals"), chromedp.WaitVisible(chromedp.CSS("#approval-"+id))))
	// The whole plan is on the page before anything is signed.
	plan := waitText(t, ctx, "#approval-"+id+" dl", "/usr/bin/uname")
	require.Contains(t, plan, `"-s"`)
	require.Contains(t, plan, "(private scratch directory)")
	rec, err := b.p.Approval(testutil.Context(t, 5*time.Second), id)
	require.NoError(t, err)
	require.Contains(t, plan, rec.Approval.Hash)

	// A key nobody trusts: signed fine, refused by the exec worker.
	kp, err := nkeys.CreateUser()
	require.NoError(t, err)
	stranger, err := kp.Seed()
	require.NoError(t, err)
	loadSeed(t, ctx, string(stranger))
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#approval-"+id+" button.approve"))))
	out := waitText(t, ctx, "#approval-"+id+" .outcome", "Refused")
	require.Contains(t, out, string(contracts.CodeDenied))
	rec, err = b.p.Approval(testutil.Context(t, 5*time.Second), id)
	require.NoError(t, err)
	require.Equal(t, contracts.ExecApprovalPending, rec.Status, "the command did not run")
	ectx := testutil.Context(t, 5*time.Second)
	events, err := bus.NewEvents(ectx, testutil.JetStream(t, b.nc), contracts.Subjects{})
	require.NoError(t, err)
	ev, _, err := events.Last(ectx, "agent", id)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusApprovalPending, ev.Data.Status)

	// The operator's own key: approved, and the command runs.
	loadSeed(t, ctx, b.seed)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#approval-"+id+" button.approve"))))
	waitText(t, ctx, "#approval-"+id+" .outcome", "approved")
	end, err := b.p.Await(testutil.Context(t, 20*time.Second), "agent", id, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, end.Data.Status, "%s", end.Data.Error)
	res, _, err := producer.ExecResult(end)
	require.NoError(t, err)
	require.Contains(t, res.Stdout, "Linux")
	rec, err = b.p.Approval(testutil.Context(t, 5*time.Second), id)
	require.NoError(t, err)
	require.Equal(t, contracts.ExecApprovalApproved, rec.Status)
	pub, err := nkeys.FromSeed([]byte(b.seed))
	require.NoError(t, err)
	want, err := pub.PublicKey()
	require.NoError(t, err)
	require.Equal(t, want, rec.Decision.Approver, "signed with the page's key")

	// The seed never reached the console: nothing it holds names it.
	stored, err := chromedp.Run(ctx, chromedp.Evaluate[string](`sessionStorage.getItem("toolq.approverSeed") || ""`))
	require.NoError(t, err)
	require.Empty(t, stored, "not kept unless asked")
}

// TestBrowserApproveAlways: the page lists the exact allowlist entry an
// always-approval adds and takes it only once the box is ticked; signed
// with the operator's key in the page, the command runs, and a second
// identical command runs without approval.
func TestBrowserApproveAlways(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := tab(t)
	id := b.pendingExec(t, "uname -n")
	art := "#approval-" + id
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.url+"approvals"), chromedp.WaitVisible(chromedp.CSS(art))))
	entries := waitText(t, ctx, art+" .always-entries", "'/usr/bin/uname' -n")
	require.Equal(t, "'/usr/bin/uname' -n", strings.TrimSpace(entries), "exactly one entry, exactly this argv")
	loadSeed(t, ctx, b.seed)

	// Off until the person confirms what the allowlist gains.
	disabled := func() bool {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`document.querySelector(%q).disabled`, art+" button.approve-always")))
		require.NoError(t, err)
		return v
	}
	require.True(t, disabled(), "not before the box is ticked")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(art+" input.always-confirm"))))
	require.False(t, disabled(), "ticked")
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(art+" button.approve-always"))))
	waitText(t, ctx, art+" .outcome", "approved always")

	end, err := b.p.Await(testutil.Context(t, 20*time.Second), "agent", id, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, end.Data.Status, "%s", end.Data.Error)
	res, _, err := producer.ExecResult(end)
	require.NoError(t, err)
	require.NotEmpty(t, strings.TrimSpace(res.Stdout), "the host name")
	rec, err := b.p.Approval(testutil.Context(t, 5*time.Second), id)
	require.NoError(t, err)
	require.True(t, rec.Decision.Always, "the signed decision says always")

	// The same command again: no approval, it just runs.
	ctx2 := testutil.Context(t, 20*time.Second)
	job, err := b.p.SubmitExec(ctx2, &contracts.ExecInput{Command: "uname -n"}, nil)
	require.NoError(t, err)
	ev, err := b.p.Await(ctx2, job.Session, job.ID, &producer.AwaitOpts{Parked: true})
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status, "allowlisted: ran without approval")
	again, _, err := producer.ExecResult(ev)
	require.NoError(t, err)
	require.Equal(t, res.Stdout, again.Stdout)
}

// TestBrowserApproveForTenant: a tenant's approval, signed in the page
// with the tenant's approver's key (the decision names the tenant under
// its signature), runs; the operator's own key is not that tenant's.
func TestBrowserApproveForTenant(t *testing.T) {
	t.Parallel()
	b := setupWith(t, &options{tenants: []string{"ACME"}})
	ctx := tab(t)
	job, last := b.pendingTenantExec(t, "ACME", "uname -s")
	art := "#approval-" + job.ID
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.url+"approvals?tenant=ACME"), chromedp.WaitVisible(chromedp.CSS(art))))
	loadSeed(t, ctx, b.seed)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(art+" button.approve"))))
	waitText(t, ctx, art+" .outcome", "Refused")
	require.Equal(t, contracts.StatusApprovalPending, last(), "not ACME's approver: nothing ran")
	loadSeed(t, ctx, b.tenantSeeds["ACME"])
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(art+" button.approve"))))
	waitText(t, ctx, art+" .outcome", "approved")
	require.Eventually(t, func() bool { return last() == contracts.StatusCompleted }, 20*time.Second, 20*time.Millisecond)
}

// loadSeed types seed into the approvals page's key field and waits until
// the page signs with it.
func loadSeed(t *testing.T, ctx context.Context, seed string) {
	t.Helper()
	kp, err := nkeys.FromSeed([]byte(seed))
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS("#seed"), seed), chromedp.Click(chromedp.CSS("#seed-load"))))
	waitText(t, ctx, "#signer-state", "Signing as "+pub)
}

// TestBrowserRequeue: a dead letter requeued from the DLQ page runs again
// and completes.
func TestBrowserRequeue(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := tab(t)
	id := b.deadLetter(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.url+"dlq"), chromedp.WaitVisible(chromedp.CSS("#dlq"))))
	waitText(t, ctx, "#dlq tbody", id)
	attr, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS("#dlq tbody tr"), "data-seq"))
	require.NoError(t, err)
	seq := attr.Value
	b.flaky.broken.Store(false)
	require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#dlq tr[data-seq="`+seq+`"] button.requeue`))))
	newID := id + "_rq" + seq
	waitText(t, ctx, "main .done", "requeued dead letter "+seq+" as job "+newID)
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#dlq tbody tr").length`))
	require.NoError(t, err)
	require.Zero(t, rows, "the dead letter is gone")
	ev, err := b.p.Await(testutil.Context(t, 20*time.Second), "agent", newID, nil)
	require.NoError(t, err)
	require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
	require.JSONEq(t, `{"n":1}`, string(ev.Data.Result))

	// It shows on the jobs page, completed.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.url+"jobs?tool=flaky")))
	waitText(t, ctx, fmt.Sprintf(`tr[data-key="/agent/%s"] td:nth-child(2)`, newID), "completed")
}

// TestBrowserLogin: with a token, the browser is sent to the login form,
// logs in once, and the pages and their live feed work on the cookie.
func TestBrowserLogin(t *testing.T) {
	t.Parallel()
	const token = "console-token-for-the-browser-test"
	b := setup(t, &Config{Token: token})
	ctx := tab(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(b.url+"dlq?tool=flaky"), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`))))
	require.NoError(t, chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS(`input[name="token"]`), "not-the-console-token"), chromedp.Submit(chromedp.CSS(`input[name="token"]`))))
	waitText(t, ctx, "main .error", "wrong token")
	require.NoError(t, chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS(`input[name="token"]`), token), chromedp.Submit(chromedp.CSS(`input[name="token"]`))))
	waitText(t, ctx, "h1", "Dead letters")
	loc, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.pathname + location.search`))
	require.NoError(t, err)
	require.Equal(t, "/dlq?tool=flaky", loc, "back where the login started")
	live(t, ctx, b.url+"jobs")
	job, err := b.p.Submit(testutil.Context(t, 10*time.Second), worker.ToolNoop, json.RawMessage(`{}`), nil)
	require.NoError(t, err)
	waitText(t, ctx, fmt.Sprintf(`tr[data-key="/%s/%s"] td:nth-child(2)`, job.Session, job.ID), "completed")
	stayed(t, ctx)
}
