package cli

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
)

// TestUITenants: the console is the operator's. On the operator's
// connection it shows every tenant's jobs, and its tenant filter (pages
// and live feed) shows one tenant's only, though two tenants used the same
// session and job id; a tenant's credentials are refused before anything
// is served.
func TestUITenants(t *testing.T) {
	t.Parallel()
	b := startTenantBus(t)
	submit := func(tenant, id string) {
		t.Helper()
		args := append(append([]string{"--nats", b.url}, b.as(tenant)...), "submit", "--tool", "noop", "--session", "s", "--id", id, "--input", `{}`, "--wait")
		code, _, errOut := run(t, args...)
		require.Equal(t, 0, code, errOut)
	}
	submit("ACME", "job-1")
	submit("GLOBEX", "job-1")

	onc, err := nats.Connect(b.operator)
	require.NoError(t, err)
	t.Cleanup(onc.Close)
	g := &globals{prefix: contracts.DefaultPrefix, log: slog.New(slog.DiscardHandler), timeout: 10 * time.Second, stdout: io.Discard, stderr: io.Discard}
	con, err := (&uiFlags{listen: "127.0.0.1:0"}).start(testutil.Context(t, 10*time.Second), g, onc, "")
	require.NoError(t, err)
	t.Cleanup(func() { stopUI(con) })

	page := func(path string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(testutil.Context(t, 10*time.Second), http.MethodGet, con.URL()+path, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
		return string(body)
	}
	all := page("jobs")
	require.Contains(t, all, `data-key="ACME/s/job-1"`)
	require.Contains(t, all, `data-key="GLOBEX/s/job-1"`)
	acme := page("jobs?tenant=ACME")
	require.Contains(t, acme, `data-key="ACME/s/job-1"`)
	require.NotContains(t, acme, `data-key="GLOBEX/s/job-1"`)
	require.Contains(t, page("job?tenant=GLOBEX&session=s&id=job-1"), "completed")
	require.NotContains(t, page("jobs?tenant=."), "job-1", "the default tenant ran none")

	// The live feed of ACME: GLOBEX's next job is not in it, ACME's is.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, con.URL()+"live?tenant=ACME&kind=job", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	require.True(t, lines.Scan())
	require.Equal(t, "retry: 2000", lines.Text(), "the feed is open")
	submit("GLOBEX", "job-2")
	submit("ACME", "job-2")
	for lines.Scan() {
		l := lines.Text()
		data, ok := strings.CutPrefix(l, "data: ")
		if !ok {
			continue
		}
		require.Contains(t, data, `"tenant":"ACME"`, "only ACME's events: %s", data)
		if strings.Contains(data, `"jobId":"job-2"`) {
			break
		}
	}
	require.NoError(t, lines.Err())

	// A tenant's agent cannot run the console, with or without saying so.
	for _, extra := range [][]string{b.as("ACME"), {"--nkey-seed", b.seeds["GLOBEX"]}} {
		full := append(append([]string{"--nats", b.url, "--timeout", "2s", "--json"}, extra...), "ui", "--listen", "127.0.0.1:0")
		code, out, errOut := run(t, full...)
		require.Equal(t, 2, code, "%v: %s", full, errOut)
		require.Empty(t, out)
		got, msg := requireJSONError(t, errOut)
		require.Equal(t, string(contracts.CodeInvalidInput), got)
		require.Contains(t, msg, "is an operator command")
	}
}
