package shell

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

// requireStopped runs script in the sandbox and requires a denied error
// naming want; then the same runner still runs a command.
func requireStopped(t *testing.T, b *runBundle, script, want string) *Result {
	t.Helper()
	start := time.Now()
	res, err := b.runner.Run(context.Background(), b.plan(HostSandbox, script, 30*time.Second))
	var ce *contracts.Error
	require.ErrorAs(t, err, &ce, "want a denied error (result %+v)", res)
	require.Equal(t, contracts.CodeDenied, ce.Code, ce.Message)
	require.Contains(t, ce.Message, want)
	require.Less(t, time.Since(start), 20*time.Second, "stopped, not left to its timeout")
	require.NotNil(t, res)

	next, err := b.runner.Run(context.Background(), b.plan(HostSandbox, "echo next", 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, "next\n", next.Stdout)
	return res
}

func TestSandboxNestedUserNamespace(t *testing.T) {
	t.Parallel()
	b := setupRun(t, nil)
	// unshare(2) is refused by the seccomp filter, so `unshare -U -r id`
	// cannot make itself root again.
	res := requireStopped(t, b, "unshare -U -r id -u", "forbidden system call")
	require.NotContains(t, res.Stdout, "0")
	require.Equal(t, "bad system call", res.Signal)
	// A new namespace through clone's flags, by a program of its own.
	nr := map[string]int{"amd64": 56, "arm64": 220}[runtime.GOARCH]
	require.NotZero(t, nr, "clone's number on %s", runtime.GOARCH)
	requireStopped(t, b, fmt.Sprintf(`exec python3 -c 'import ctypes; print(ctypes.CDLL(None).syscall(%d, 0x10000000 | 17, 0, 0, 0, 0))'`, nr), "forbidden system call")

	// Without the filter, --disable-userns still refuses one.
	b.runner.noSeccomp = true
	res, err := b.runner.Run(context.Background(), b.plan(HostSandbox, "unshare -U -r id -u", 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, 1, res.ExitCode, res.Stdout)
	require.Empty(t, res.Stdout)
	require.Contains(t, res.Stderr, "unshare failed")
}

func TestSandboxForkBomb(t *testing.T) {
	t.Parallel()
	b := setupRun(t, &RunnerConfig{Limits: Limits{Processes: 32}})
	requireCgroups(t, b.runner)
	requireStopped(t, b, `b(){ b | b & }; b; sleep 20`, "process limit of 32 reached")
}

func TestSandboxMemoryBomb(t *testing.T) {
	t.Parallel()
	b := setupRun(t, &RunnerConfig{Limits: Limits{MemoryBytes: 64 << 20}})
	requireCgroups(t, b.runner)
	// tail keeps the whole "line" of /dev/zero in memory.
	requireStopped(t, b, `tail /dev/zero`, "memory limit of 67108864 bytes reached")
}

func TestSandboxMemoryBombWithoutCgroups(t *testing.T) {
	t.Parallel()
	b := setupRun(t, &RunnerConfig{Limits: Limits{MemoryBytes: 64 << 20}, CgroupParent: CgroupOff})
	// RLIMIT_AS: the allocation fails instead; the command reports it.
	res, err := b.runner.Run(context.Background(), b.plan(HostSandbox, `tail /dev/zero`, 20*time.Second))
	require.NoError(t, err)
	require.NotEqual(t, 0, res.ExitCode)
	require.Contains(t, res.Stderr, "memory exhausted")
}

func TestSandboxHugeFile(t *testing.T) {
	t.Parallel()
	b := setupRun(t, &RunnerConfig{Limits: Limits{FileBytes: 1 << 20, TmpBytes: 2 << 20}})
	requireStopped(t, b, `head -c 10000000 /dev/zero > big`, "file size limit of 1048576 bytes exceeded")
	// /tmp is a tmpfs of TmpBytes: many files under the per-file cap fill it.
	res, err := b.runner.Run(context.Background(), b.plan(HostSandbox,
		`for i in 1 2 3 4; do head -c 900000 /dev/zero > /tmp/f$i || exit 3; done`, 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, 3, res.ExitCode, res.Stderr)
	require.Contains(t, res.Stderr, "No space left on device")
}

// requireCgroups fails a test that needs cgroup caps on a host without
// them, with why.
func requireCgroups(t *testing.T, r *Runner) {
	t.Helper()
	mode, note := r.Cgroups()
	require.NotEqual(t, "none", mode, "this test needs a writable pids and memory cgroup (v2 delegated or v1): %s", note)
	require.True(t, strings.HasPrefix(mode, "cgroup"))
}

func TestSandboxWorkdirGrowth(t *testing.T) {
	t.Parallel()
	b := setupRun(t, &RunnerConfig{Limits: Limits{WorkdirBytes: 8 << 20}, AllowWorkerHost: true})
	// What the workdir held before the run does not count.
	require.NoError(t, os.WriteFile(filepath.Join(b.work, "before"), make([]byte, 16<<20), 0o600))

	// Many files, each under the per-file cap, past the total.
	const many = `for i in $(seq 1 64); do head -c 1048576 /dev/zero > f$i || exit 3; done; sleep 20`
	requireStopped(t, b, many, "sandbox limit: workdir grew past 8 MiB")
	// On the worker host too.
	removeGlob(t, filepath.Join(b.work, "f*"))
	res, err := b.runner.Run(context.Background(), b.plan(HostWorker, many, 30*time.Second))
	var ce *contracts.Error
	require.ErrorAs(t, err, &ce, "want a denied error (result %+v)", res)
	require.Equal(t, contracts.CodeDenied, ce.Code, ce.Message)
	require.Contains(t, ce.Message, "workdir grew past 8 MiB")
	require.Equal(t, -1, res.ExitCode)

	// Under the cap: unaffected.
	removeGlob(t, filepath.Join(b.work, "f*"))
	for _, host := range []Host{HostSandbox, HostWorker} {
		res, err := b.runner.Run(context.Background(), b.plan(host,
			`for i in 1 2 3 4; do head -c 1048576 /dev/zero > g$i || exit 3; done; sleep 0.5; echo ok`, 10*time.Second))
		require.NoError(t, err, host)
		require.Equal(t, "ok\n", res.Stdout, host)
	}

	// Past the cap within one poll: reported when the command ends.
	requireStopped(t, b, `head -c 1048576 /dev/zero > h1; for i in 2 3 4 5 6 7 8 9 10; do cp h1 h$i; done`,
		"workdir grew past 8 MiB") // usually "(found when the command ended)"
}

func TestSandboxWorkdirEntries(t *testing.T) {
	t.Parallel()
	b := setupRun(t, &RunnerConfig{Limits: Limits{WorkdirBytes: 8 << 20}})
	b.runner.workdirEntries = 200
	requireStopped(t, b, `mkdir d && cd d && for i in $(seq 1 1000); do : > e$i; done; sleep 20`,
		"workdir grew by more than 200 files and directories")

	// Off: no watchdog.
	off := setupRun(t, &RunnerConfig{Limits: Limits{WorkdirBytes: -1}})
	res, err := off.runner.Run(context.Background(), off.plan(HostSandbox,
		`for i in $(seq 1 12); do head -c 1048576 /dev/zero > f$i || exit 3; done; echo ok`, 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, "ok\n", res.Stdout)
}

func removeGlob(t *testing.T, pattern string) {
	t.Helper()
	names, err := filepath.Glob(pattern)
	require.NoError(t, err)
	for _, n := range names {
		require.NoError(t, os.Remove(n))
	}
}
