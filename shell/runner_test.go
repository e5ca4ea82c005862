package shell

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/contracts"
)

type runBundle struct {
	runner *Runner
	policy Policy // the real system PATH, full security
	shell  string
	work   string
}

// setupRun needs bash and bwrap on the machine: the sandbox tests are the
// point of this file, so a missing tool fails them instead of skipping.
func setupRun(t *testing.T, cfg *RunnerConfig) *runBundle {
	t.Helper()
	c := RunnerConfig{AllowWorkerHost: true}
	if cfg != nil {
		c = *cfg
	}
	if c.ScratchDir == "" {
		c.ScratchDir = t.TempDir()
	}
	r, err := NewRunner(&c)
	require.NoError(t, err)
	p := Policy{Security: SecurityFull, Ask: AskOff, AllowWorkerHost: true}
	sh, ok := p.ResolveShell()
	require.True(t, ok, "bash is required on %s", p.PathEnv())
	work := filepath.Join(t.TempDir(), "work")
	require.NoError(t, os.Mkdir(work, 0o750))
	return &runBundle{runner: r, policy: p, shell: sh, work: work}
}

func (b *runBundle) plan(host Host, script string, timeout time.Duration) *Plan {
	return &Plan{Command: script, Script: script, Shell: b.shell, Workdir: b.work, Path: DefaultPath, Host: host, TimeoutMs: timeout.Milliseconds()}
}

// mkfifo makes a FIFO the command writes to; reading it blocks until the
// command has written, which is the test's signal that it got there.
func mkfifo(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "ready.fifo")
	require.NoError(t, syscall.Mkfifo(p, 0o666))
	return p
}

func readLine(t *testing.T, fifo string) string {
	t.Helper()
	f, err := os.Open(fifo) //nolint:gosec // G304: a FIFO the test made in its temp dir
	require.NoError(t, err)
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	require.NoError(t, err)
	return strings.TrimSpace(line)
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z' && s[i+2] != 'X'
}

// requireGone polls the process table (an external system) with a deadline.
func requireGone(t *testing.T, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			require.True(t, time.Now().Before(deadline), "process %d outlived its job", pid)
			pollPause()
		}
	}
}

func pollPause() { time.Sleep(10 * time.Millisecond) } // between polls of the process table

// markedPids finds host processes whose command line contains marker.
func markedPids(marker string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(marker)) && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

func TestRunWorkerHost(t *testing.T) {
	t.Parallel()
	b := setupRun(t, nil)
	pl := b.plan(HostWorker, `echo "out"; echo err >&2; pwd; echo "HOME=$HOME A=$A"; env | cut -d= -f1 | sort | tr '\n' ' '; exit 3`, 10*time.Second)
	pl.Env = map[string]string{"A": "x y"}
	res, err := b.runner.Run(context.Background(), pl)
	require.NoError(t, err)
	require.Equal(t, 3, res.ExitCode)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	require.Len(t, lines, 4, res.Stdout)
	require.Equal(t, "out", lines[0])
	require.Equal(t, b.work, lines[1])
	require.Equal(t, "HOME="+b.work+" A=x y", lines[2])
	// Nothing of the worker's environment is inherited.
	require.Equal(t, "A HOME LANG PATH PWD SHLVL _", strings.TrimSpace(lines[3]))
	require.Equal(t, "err\n", res.Stderr)
	require.False(t, res.StdoutTruncated || res.StderrTruncated || res.TimedOut)
	require.GreaterOrEqual(t, res.DurationMs, int64(0))
}

func TestRunTimeoutKillsChildren(t *testing.T) {
	t.Parallel()
	b := setupRun(t, nil)
	fifo := mkfifo(t, b.work)
	pidfile := filepath.Join(b.work, "child.pid")
	// A child that leaves the shell's pipes, and a grandchild: both must die.
	script := fmt.Sprintf(`sleep 1000 >/dev/null 2>&1 & c1=$!
(sleep 1000 >/dev/null 2>&1 & echo $! > %[1]s.2; wait) >/dev/null 2>&1 &
echo $c1 > %[1]s
while [ ! -s %[1]s.2 ]; do :; done
echo ready > %[2]s
wait`, pidfile, fifo)
	type out struct {
		res *Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		res, err := b.runner.Run(context.Background(), b.plan(HostWorker, script, 1500*time.Millisecond))
		ch <- out{res, err}
	}()
	require.Equal(t, "ready", readLine(t, fifo))
	var pids []int
	for _, f := range []string{pidfile, pidfile + ".2"} {
		raw, err := os.ReadFile(f) //nolint:gosec // G304: a pid file in the test's temp dir
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		require.NoError(t, err)
		require.True(t, alive(pid), "child %d should be running before the timeout", pid)
		pids = append(pids, pid)
	}
	o := <-ch
	require.ErrorIs(t, o.err, contracts.ErrTimeout)
	require.NotNil(t, o.res)
	require.True(t, o.res.TimedOut)
	require.Equal(t, -1, o.res.ExitCode)
	requireGone(t, pids...)
}

func TestRunCancelKillsGroup(t *testing.T) {
	t.Parallel()
	b := setupRun(t, nil)
	fifo := mkfifo(t, b.work)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type out struct {
		res *Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		res, err := b.runner.Run(ctx, b.plan(HostWorker, fmt.Sprintf(`sleep 1000 >/dev/null 2>&1 & echo $! > %s; wait`, fifo), time.Hour))
		ch <- out{res, err}
	}()
	pid, err := strconv.Atoi(readLine(t, fifo))
	require.NoError(t, err)
	require.True(t, alive(pid))
	cancel()
	o := <-ch
	require.ErrorIs(t, o.err, contracts.ErrCancelled)
	require.False(t, o.res.TimedOut)
	requireGone(t, pid)
}

func TestRunExitKillsLeftovers(t *testing.T) {
	t.Parallel()
	b := setupRun(t, nil)
	pidfile := filepath.Join(b.work, "bg.pid")
	res, err := b.runner.Run(context.Background(), b.plan(HostWorker, fmt.Sprintf(`sleep 1000 >/dev/null 2>&1 & echo $! > %s`, pidfile), 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	raw, err := os.ReadFile(pidfile) //nolint:gosec // G304: a pid file in the test's temp dir
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	require.NoError(t, err)
	requireGone(t, pid)
}

func TestRunOutputCap(t *testing.T) {
	t.Parallel()
	b := setupRun(t, &RunnerConfig{MaxOutputBytes: 1001, AllowWorkerHost: true})
	res, err := b.runner.Run(context.Background(), b.plan(HostWorker,
		`head -c 100000 /dev/zero | tr '\0' a; for i in $(seq 1000); do printf 'é'; done >&2`, 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode)
	require.Equal(t, strings.Repeat("a", 1001), res.Stdout)
	require.True(t, res.StdoutTruncated)
	require.True(t, res.StderrTruncated)
	require.True(t, utf8.ValidString(res.Stderr), "cut inside a UTF-8 sequence")
	require.Equal(t, strings.Repeat("é", 500), res.Stderr)

	res, err = b.runner.Run(context.Background(), b.plan(HostWorker, `printf 12345`, 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, "12345", res.Stdout)
	require.False(t, res.StdoutTruncated)
}

func TestRunRefusals(t *testing.T) {
	t.Parallel()
	b := setupRun(t, &RunnerConfig{AllowWorkerHost: false})
	_, err := b.runner.Run(context.Background(), b.plan(HostWorker, "true", time.Second))
	require.ErrorIs(t, err, contracts.ErrDenied)

	pl := b.plan(HostSandbox, "true", time.Second)
	pl.Env = map[string]string{"LD_PRELOAD": "/tmp/x.so"}
	_, err = b.runner.Run(context.Background(), pl)
	require.ErrorIs(t, err, contracts.ErrDenied)

	pl = b.plan(HostSandbox, "true", time.Second)
	pl.Shell = "bash"
	_, err = b.runner.Run(context.Background(), pl)
	require.ErrorIs(t, err, contracts.ErrInvalidInput)

	pl = b.plan(HostSandbox, "true", 0)
	_, err = b.runner.Run(context.Background(), pl)
	require.ErrorIs(t, err, contracts.ErrInvalidInput)

	_, err = b.runner.Run(context.Background(), nil)
	require.ErrorIs(t, err, contracts.ErrInvalidInput)
}

func TestSandboxFailsClosed(t *testing.T) {
	t.Parallel()
	// No bwrap at all.
	b := setupRun(t, &RunnerConfig{Bwrap: filepath.Join(t.TempDir(), "bwrap")})
	_, err := b.runner.Run(context.Background(), b.plan(HostSandbox, "echo hi", 5*time.Second))
	require.ErrorIs(t, err, contracts.ErrRuntimeUnavailable)
	require.ErrorIs(t, b.runner.Probe(context.Background()), contracts.ErrRuntimeUnavailable)

	// A bwrap that cannot set up its namespaces (as where user namespaces
	// are restricted): it never reports an exit code.
	fake := filepath.Join(t.TempDir(), "bwrap")
	//nolint:gosec // G306: a fake bwrap must have its exec bits; the temp dir is private
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"), 0o755))
	b = setupRun(t, &RunnerConfig{Bwrap: fake})
	_, err = b.runner.Run(context.Background(), b.plan(HostSandbox, "echo hi", 5*time.Second))
	require.ErrorIs(t, err, contracts.ErrRuntimeUnavailable)
	require.Contains(t, err.Error(), "Permission denied")

	// A workdir reached through a symbolic link (swapped in after the
	// policy check) is not bound.
	b = setupRun(t, nil)
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(t.TempDir(), link))
	pl := b.plan(HostSandbox, "echo x > f", 5*time.Second)
	pl.Workdir = link
	_, err = b.runner.Run(context.Background(), pl)
	require.ErrorIs(t, err, contracts.ErrRuntimeUnavailable)
	require.Contains(t, err.Error(), "symbolic links")

	// A real bwrap whose mount set-up fails.
	b = setupRun(t, &RunnerConfig{SandboxReadOnly: []string{"/usr"}}) // no /bin/bash link
	pl = b.plan(HostSandbox, "echo hi", 5*time.Second)
	pl.Shell = "/bin/bash"
	_, err = b.runner.Run(context.Background(), pl)
	require.ErrorIs(t, err, contracts.ErrRuntimeUnavailable)
}

func TestSandboxRuns(t *testing.T) {
	t.Parallel()
	b := setupRun(t, nil)
	require.NoError(t, b.runner.Probe(context.Background()))
	pl := b.plan(HostSandbox, `echo hi; id -u; pwd; hostname; echo x > f; cat f; ls /proc/self/fd | tr '\n' ' '; exit 7`, 10*time.Second)
	res, err := b.runner.Run(context.Background(), pl)
	require.NoError(t, err, "bwrap must work here")
	require.Equal(t, 7, res.ExitCode, res.Stderr)
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	require.Len(t, lines, 6, res.Stdout)
	require.Equal(t, "hi", lines[0])
	require.Equal(t, strconv.Itoa(DefaultSandboxUID), lines[1])
	require.Equal(t, b.work, lines[2])
	require.Equal(t, "sandbox", lines[3])
	require.Equal(t, "x", lines[4])
	require.Equal(t, "0 1 2 3", strings.TrimSpace(lines[5]), "only stdio (and ls's own dir fd) inside")
	raw, err := os.ReadFile(filepath.Join(b.work, "f"))
	require.NoError(t, err)
	require.Equal(t, "x\n", string(raw))

	// A private scratch workdir when the plan names none; removed after.
	pl = b.plan(HostSandbox, `pwd; echo y > g; cat g`, 10*time.Second)
	pl.Workdir = ""
	res, err = b.runner.Run(context.Background(), pl)
	require.NoError(t, err)
	lines = strings.Split(strings.TrimSpace(res.Stdout), "\n")
	require.Len(t, lines, 2, res.Stdout+res.Stderr)
	require.Equal(t, "y", lines[1])
	require.NoDirExists(t, lines[0])
}

func TestSandboxNoNetwork(t *testing.T) {
	t.Parallel()
	b := setupRun(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	script := fmt.Sprintf(`exec 3<>/dev/tcp/127.0.0.1/%d && echo connected`, port)

	// Control: on the worker host the same command connects, so the test
	// can tell a sandbox that leaks the network.
	res, err := b.runner.Run(context.Background(), b.plan(HostWorker, script, 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, "connected\n", res.Stdout, res.Stderr)

	res, err = b.runner.Run(context.Background(), b.plan(HostSandbox, script, 10*time.Second))
	require.NoError(t, err)
	require.NotEqual(t, 0, res.ExitCode)
	require.Empty(t, res.Stdout)
	require.NotEmpty(t, res.Stderr)

	// Nothing but a loopback device in the sandbox's network namespace.
	res, err = b.runner.Run(context.Background(), b.plan(HostSandbox, `tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '`, 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, "lo\n", res.Stdout, res.Stderr)
}

func TestSandboxCannotWriteOutsideWorkdir(t *testing.T) {
	t.Parallel()
	b := setupRun(t, nil)
	outside := t.TempDir()
	sibling := filepath.Join(filepath.Dir(b.work), "sibling")
	marker := fmt.Sprintf("toolq-sandbox-test-%d", time.Now().UnixNano())
	script := fmt.Sprintf(`
echo in > inside.txt && echo inside-ok
echo x > %[1]s/f && echo outside-written
echo x > ../sibling && echo sibling-written-in-private-tmp
echo x > /usr/%[2]s && echo usr-written
echo x > /etc/%[2]s && echo etc-written
mkdir -p /var/tmp/%[2]s && echo var-written
echo x > /tmp/t && echo tmp-ok
exit 0`, outside, marker)

	// Control: the worker host can write outside.
	res, err := b.runner.Run(context.Background(), b.plan(HostWorker, fmt.Sprintf(`echo x > %s/f && echo outside-written`, outside), 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, "outside-written\n", res.Stdout)
	require.NoError(t, os.Remove(filepath.Join(outside, "f")))

	res, err = b.runner.Run(context.Background(), b.plan(HostSandbox, script, 10*time.Second))
	require.NoError(t, err)
	require.Contains(t, res.Stdout, "inside-ok")
	require.Contains(t, res.Stdout, "tmp-ok")
	require.NotContains(t, res.Stdout, "outside-written")
	require.NotContains(t, res.Stdout, "usr-written")
	require.NotContains(t, res.Stdout, "etc-written")
	require.NotContains(t, res.Stdout, "var-written")
	require.FileExists(t, filepath.Join(b.work, "inside.txt"))
	require.NoFileExists(t, filepath.Join(outside, "f"))
	require.NoFileExists(t, sibling, "the workdir's parent is not the host's")
	require.NoFileExists(t, "/usr/"+marker)
	require.NoFileExists(t, "/etc/"+marker)
	require.NoDirExists(t, "/var/tmp/"+marker)
}

func TestSandboxTimeoutKillsNamespace(t *testing.T) {
	t.Parallel()
	b := setupRun(t, nil)
	fifo := mkfifo(t, b.work)
	marker := fmt.Sprintf("toolqmark%d", time.Now().UnixNano())
	script := fmt.Sprintf(`(exec -a %[1]s sleep 1000) >/dev/null 2>&1 &
(setsid bash -c 'exec -a %[1]s sleep 1000' >/dev/null 2>&1 &)
echo ready > %[2]s
wait`, marker, fifo)
	type out struct {
		res *Result
		err error
	}
	ch := make(chan out, 1)
	go func() {
		res, err := b.runner.Run(context.Background(), b.plan(HostSandbox, script, 1500*time.Millisecond))
		ch <- out{res, err}
	}()
	require.Equal(t, "ready", readLine(t, fifo))
	// The sandbox's processes are visible from the host; wait until both
	// sleepers exist (the second one starts asynchronously).
	deadline := time.Now().Add(5 * time.Second)
	for len(markedPids(marker)) < 2 {
		require.True(t, time.Now().Before(deadline), "sandboxed sleepers never appeared")
		pollPause()
	}
	pids := markedPids(marker)
	o := <-ch
	require.ErrorIs(t, o.err, contracts.ErrTimeout)
	require.True(t, o.res.TimedOut)
	requireGone(t, pids...)
}

func TestEndToEndAllowlistedPipelineInSandbox(t *testing.T) {
	t.Parallel()
	b := setupRun(t, nil)
	p := Policy{
		Security: SecurityAllowlist, Ask: AskOnMiss, Allowlist: []string{"/usr/bin/echo"},
		SafeBins: []string{"tr"}, WorkdirRoots: []string{filepath.Dir(b.work)},
	}
	require.NoError(t, p.Validate())
	in := &Input{Command: `echo "it's" 'a b' | tr a-z A-Z`, Workdir: b.work}
	in.ApplyDefaults()
	eff := Effective(p, in)
	d := Evaluate(eff, in)
	require.Equal(t, Allow, d.Outcome, d.Reason)
	pl, err := NewPlan(eff, in, &d)
	require.NoError(t, err)
	require.Equal(t, int64(DefaultTimeoutSeconds*1000), pl.TimeoutMs)
	res, err := b.runner.Run(context.Background(), pl)
	require.NoError(t, err)
	require.Equal(t, "IT'S A B\n", res.Stdout, res.Stderr)
}

// TestAllowedScriptRunsCheckedArgv runs allowed commands for real, with
// bash, against fake binaries that record the argv they get: every process
// that ran must have got exactly an argv the policy checked.
func TestAllowedScriptRunsCheckedArgv(t *testing.T) {
	t.Parallel()
	pb := setupPolicy(t)
	for _, n := range fakeBins {
		//nolint:gosec // G306: a fake executable must have its exec bits; the temp dir is private
		require.NoError(t, os.WriteFile(filepath.Join(pb.bin, n), []byte("#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\" > \"$ARGV_DIR/$$\"\n"), 0o755))
	}
	rb := setupRun(t, nil)
	p := pb.policy
	p.Shell = rb.shell
	cmds := []string{
		`l's' -la "it's" 'a b' e\ f`,
		`echo "a \$HOME \"q\"" '$(id)' '` + "`id`" + `' \* '*' "x?" \$x`,
		`ls | grep -e 'a|b' | wc -l && echo ok; ! true || echo no`,
		"echo \"multi\nline\" 'tab\there'",
		`echo 'a'"b"c\"d`,
		`echo -- -rf '--' '' ""`,
		`echo "\\" '\' "\a" \\`,
		"echo a\\\nb",
		`echo '#' x#y "#"; echo ';' '&&' '|' '>' '<'`,
	}
	for _, cmd := range cmds {
		in := &Input{Command: cmd, Host: HostWorker, Workdir: pb.work}
		in.ApplyDefaults()
		d := Evaluate(p, in)
		require.Equal(t, Allow, d.Outcome, "%q: %s", cmd, d.Reason)
		argvDir := filepath.Join(pb.work, fmt.Sprintf("argv%d", time.Now().UnixNano()))
		require.NoError(t, os.Mkdir(argvDir, 0o750))
		in.Env = map[string]string{"ARGV_DIR": argvDir}
		pl, err := NewPlan(p, in, &d)
		require.NoError(t, err)
		res, err := rb.runner.Run(context.Background(), pl)
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, "%q: %s", cmd, res.Stderr)

		ents, err := os.ReadDir(argvDir)
		require.NoError(t, err)
		var got []string
		for _, e := range ents {
			raw, err := os.ReadFile(filepath.Join(argvDir, e.Name())) //nolint:gosec // G304: a file the fake binaries wrote in the test's temp dir
			require.NoError(t, err)
			got = append(got, string(raw))
		}
		var want []string
		for _, argv := range d.Argv {
			want = append(want, strings.Join(argv, "\x00")+"\x00")
		}
		require.ElementsMatch(t, want, got, "%q ran as %q", cmd, d.Script)
	}
}

func TestRunWithHooks(t *testing.T) {
	t.Parallel()
	b := setupRun(t, &RunnerConfig{MaxOutputBytes: 4, AllowWorkerHost: true})
	var live, liveErr bytes.Buffer
	started := 0
	res, err := b.runner.RunWith(context.Background(), b.plan(HostWorker, `echo 123456789; echo e >&2`, 10*time.Second),
		&RunOpts{Stdout: &live, Stderr: &liveErr, Started: func() { started++ }})
	require.NoError(t, err)
	require.Equal(t, 1, started)
	require.Equal(t, "123456789\n", live.String(), "the live stream is not capped")
	require.Equal(t, "e\n", liveErr.String())
	require.Equal(t, "1234", res.Stdout)
	require.True(t, res.StdoutTruncated)
}
