package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/internal/testutil"
	"github.com/toolq/toolq/producer"
	"github.com/toolq/toolq/scheduler"
)

// runScheduler runs `toolq scheduler` with args until the test ends (a
// cancelled context is the CLI's SIGINT), and checks that it stopped cleanly.
func runScheduler(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb bytes.Buffer
	root, _ := newRoot(&out, &errb)
	root.SetArgs(append(args, "--log-level", "warn"))
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, errb.String())
		case <-time.After(20 * time.Second):
			t.Error("scheduler did not stop on interrupt")
		}
	})
}

func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{"nats", "asynq"} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			url := startBus(t)
			args := []string{"--nats", url, "scheduler", "--engine", engine}
			if engine == "asynq" {
				args = append(args, "--redis", testutil.StartRedis(t).URL())
			}
			runScheduler(t, args...)

			in := filepath.Join(t.TempDir(), "job.json")
			require.NoError(t, os.WriteFile(in, []byte(`{"n":7}`), 0o600))
			code, out, errOut := run(t, "--nats", url, "--json", "schedule", "add", "--in", "1s", "--tool", "noop", "--input", "@"+in, "--session", "cli", "--id", "soon")
			require.Equal(t, 0, code, errOut)
			var s scheduler.Schedule
			require.NoError(t, json.Unmarshal([]byte(out), &s))
			require.Equal(t, "soon", s.ID)
			require.Equal(t, scheduler.KindAt, s.Kind())

			code, out, errOut = run(t, "--nats", url, "schedule", "add", "--cron", "0 2 * * *", "--tz", "Europe/Berlin", "--tool", "noop", "--id", "nightly")
			require.Equal(t, 0, code, errOut)
			require.Equal(t, "nightly\n", out)

			// The delayed job runs on the worker and completes.
			nc, err := nats.Connect(url)
			require.NoError(t, err)
			t.Cleanup(nc.Close)
			p, err := producer.New(nc, &producer.Config{Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			t.Cleanup(p.Close)
			ev, err := p.Await(testutil.Context(t, 15*time.Second), "cli", s.JobID(s.At), nil)
			require.NoError(t, err)
			require.Equal(t, contracts.StatusCompleted, ev.Data.Status)
			require.JSONEq(t, `{"n":7}`, string(ev.Data.Result))

			// ls: the one-shot is gone, the nightly one stays.
			require.Eventually(t, func() bool {
				code, out, _ := run(t, "--nats", url, "--json", "schedule", "ls")
				var list []scheduler.Info
				return code == 0 && json.Unmarshal([]byte(out), &list) == nil && len(list) == 1 && list[0].Schedule.ID == "nightly"
			}, 5*time.Second, 50*time.Millisecond)
			code, out, errOut = run(t, "--nats", url, "schedule", "ls")
			require.Equal(t, 0, code, errOut)
			require.Contains(t, out, "nightly")
			require.Contains(t, out, "0 2 * * * (Europe/Berlin)")
			code, out, errOut = run(t, "--nats", url, "schedule", "pause", "nightly")
			require.Equal(t, 0, code, errOut)
			require.Equal(t, "paused nightly\n", out)
			code, out, errOut = run(t, "--nats", url, "schedule", "ls")
			require.Equal(t, 0, code, errOut)
			require.Regexp(t, `nightly .* paused `, out)
			code, out, errOut = run(t, "--nats", url, "schedule", "resume", "nightly")
			require.Equal(t, 0, code, errOut)
			require.Equal(t, "resumed nightly\n", out)

			code, out, errOut = run(t, "--nats", url, "schedule", "rm", "nightly")
			require.Equal(t, 0, code, errOut)
			require.Equal(t, "deleted nightly\n", out)
			code, _, _ = run(t, "--nats", url, "schedule", "rm", "nightly")
			require.Equal(t, 1, code)
		})
	}
}

func TestScheduleAddRefusesBadInput(t *testing.T) {
	t.Parallel()
	url := startBus(t)
	for name, args := range map[string][]string{
		"invalid cron":   {"--cron", "61 * * * *"},
		"unknown zone":   {"--cron", "0 2 * * *", "--tz", "Mars/Olympus_Mons"},
		"past at":        {"--at", "2001-01-01T00:00:00Z"},
		"malformed at":   {"--at", "tomorrow"},
		"every too fast": {"--every", "500ms"},
		"bad input":      {"--every", "10s", "--input", "{"},
	} {
		code, _, errOut := run(t, append([]string{"--nats", url, "schedule", "add", "--tool", "noop"}, args...)...)
		require.Equal(t, 2, code, "%s: %s", name, errOut)
		require.Contains(t, errOut, "invalid_input", name)
	}
	// Two kinds at once are refused by the flags.
	code, _, errOut := run(t, "--nats", url, "schedule", "add", "--tool", "noop", "--every", "1m", "--in", "1h")
	require.NotEqual(t, 0, code)
	require.True(t, strings.Contains(errOut, "none of the others") || strings.Contains(errOut, "were all set"), errOut)
	code, _, _ = run(t, "--nats", url, "scheduler", "--engine", "cron")
	require.Equal(t, 2, code)
}
