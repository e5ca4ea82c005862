package shell

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/toolq/toolq/contracts"
)

// DefaultSandboxReadOnly are the host paths bound read-only into the
// sandbox (when they exist). Symbolic links, like /bin → usr/bin on
// merged-/usr systems, are recreated as links.
var DefaultSandboxReadOnly = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
	"/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
	"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/localtime", "/etc/ssl/certs",
}

// Runner defaults.
const (
	DefaultMaxOutputBytes = 64 << 10
	DefaultSandboxUID     = 65534
	DefaultWaitDelay      = 2 * time.Second
)

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	// Bwrap is the bubblewrap binary (a name looked up on the worker's PATH,
	// or an absolute path); empty means "bwrap".
	Bwrap string
	// SandboxReadOnly are host paths bound read-only into the sandbox;
	// nil means DefaultSandboxReadOnly.
	SandboxReadOnly []string
	// SandboxUID and SandboxGID are the ids inside the sandbox's user
	// namespace; 0 means DefaultSandboxUID (nobody).
	SandboxUID, SandboxGID int
	// ScratchDir is where private workdirs are made; empty means the OS
	// temp dir.
	ScratchDir string
	// MaxOutputBytes caps stdout and stderr each; the rest is read and
	// dropped, and the result is flagged truncated. 0 means the default.
	MaxOutputBytes int
	// AllowWorkerHost must be set for plans with host=worker (defence in
	// depth: the policy decides first).
	AllowWorkerHost bool
	// WaitDelay bounds the wait for output after the process group is
	// killed; 0 means DefaultWaitDelay.
	WaitDelay time.Duration
}

// Runner runs plans. It is safe for concurrent use.
type Runner struct {
	cfg RunnerConfig
}

// NewRunner applies defaults and validates cfg.
func NewRunner(cfg *RunnerConfig) (*Runner, error) {
	c := RunnerConfig{}
	if cfg != nil {
		c = *cfg
	}
	if c.Bwrap == "" {
		c.Bwrap = "bwrap"
	}
	if c.SandboxReadOnly == nil {
		c.SandboxReadOnly = DefaultSandboxReadOnly
	}
	for _, p := range c.SandboxReadOnly {
		if !cleanAbs(p) || p == "/" {
			return nil, fmt.Errorf("shell runner: read-only path %q: want a clean absolute path other than /", p)
		}
	}
	if c.SandboxUID == 0 {
		c.SandboxUID = DefaultSandboxUID
	}
	if c.SandboxGID == 0 {
		c.SandboxGID = DefaultSandboxUID
	}
	if c.SandboxUID < 0 || c.SandboxGID < 0 {
		return nil, fmt.Errorf("shell runner: negative sandbox uid or gid")
	}
	if c.ScratchDir == "" {
		c.ScratchDir = os.TempDir()
	}
	if c.MaxOutputBytes == 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if c.MaxOutputBytes < 0 {
		return nil, fmt.Errorf("shell runner: negative MaxOutputBytes")
	}
	if c.WaitDelay == 0 {
		c.WaitDelay = DefaultWaitDelay
	}
	sealInheritedFDs.Do(sealFDs)
	return &Runner{cfg: c}, nil
}

var sealInheritedFDs sync.Once

// sealFDs marks every descriptor above stderr close-on-exec. Go opens its
// own descriptors that way already; what is left are descriptors the worker
// inherited from whatever started it, and those must not leak into
// commands (os/exec and bwrap pass on whatever is not close-on-exec).
func sealFDs() {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		syscall.CloseOnExec(fd)
	}
}

// Result is the outcome of a run that started.
type Result = contracts.ExecResult

// Run runs plan and waits for it. A command that exits non-zero is a
// Result, not an error. Errors are *contracts.Error: runtime_unavailable
// (no bwrap, the sandbox cannot start, the shell is missing), denied (a
// host=worker plan on a runner that does not allow it), invalid_input (a
// malformed plan), and timeout or cancelled — the last two come with the
// partial Result. The whole process group (in the sandbox, the whole PID
// namespace) is killed on timeout or cancellation, and when the shell
// exits, so nothing the command started outlives it.
func (r *Runner) Run(ctx context.Context, plan *Plan) (*Result, error) {
	return r.RunWith(ctx, plan, nil)
}

// RunOpts are per-run hooks for the bus layer; every field is optional.
type RunOpts struct {
	// Stdout and Stderr receive the live output, uncapped, as it comes
	// (for background sessions that stream output as events). A slow
	// writer slows the command down.
	Stdout, Stderr io.Writer
	// Started is called once the command is running (to start the
	// approvalRunningNoticeMs timer, for instance).
	Started func()
}

// RunWith is Run with hooks.
func (r *Runner) RunWith(ctx context.Context, plan *Plan, opts *RunOpts) (*Result, error) {
	if opts == nil {
		opts = &RunOpts{}
	}
	if err := r.checkPlan(plan); err != nil {
		return nil, err
	}
	workdir := plan.Workdir
	if workdir == "" {
		dir, err := os.MkdirTemp(r.cfg.ScratchDir, "toolq-exec-")
		if err != nil {
			return nil, contracts.Errorf(contracts.CodeRuntimeUnavailable, "scratch workdir: %v", err)
		}
		defer func() { _ = os.RemoveAll(dir) }()
		workdir = dir
	}
	env := planEnv(plan, workdir)

	var cmd *exec.Cmd
	var status *os.File
	switch plan.Host {
	case HostWorker:
		cmd = exec.Command(plan.Shell, "-c", plan.Script)
		cmd.Dir = workdir
		cmd.Env = env
	case HostSandbox:
		bw, err := r.bwrapPath()
		if err != nil {
			return nil, err
		}
		wd, err := openNoSymlinks(workdir)
		if err != nil {
			return nil, err
		}
		defer wd.Close()
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, contracts.Errorf(contracts.CodeInternalError, "pipe: %v", err)
		}
		defer pr.Close()
		status = pr
		cmd = exec.Command(bw, r.bwrapArgs(plan, workdir, env)...)
		cmd.Env = []string{} // the sandbox gets its env through --setenv only
		cmd.ExtraFiles = []*os.File{pw, wd}
		defer pw.Close()
	}
	cmd.Stdin = nil
	stdout := &capWriter{max: r.cfg.MaxOutputBytes}
	stderr := &capWriter{max: r.cfg.MaxOutputBytes}
	cmd.Stdout, cmd.Stderr = tee(stdout, opts.Stdout), tee(stderr, opts.Stderr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.WaitDelay = r.cfg.WaitDelay

	timeout := time.Duration(plan.TimeoutMs) * time.Millisecond
	runCtx, cancel := context.WithTimeoutCause(ctx, timeout, errRunTimeout)
	defer cancel()

	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, contracts.Errorf(contracts.CodeRuntimeUnavailable, "start %s: %v", filepath.Base(cmd.Path), err)
	}
	if status != nil {
		// The write end belongs to bwrap now; keep ours closed so reading
		// the status stream ends when bwrap exits.
		_ = cmd.ExtraFiles[0].Close()
	}
	pgid := cmd.Process.Pid
	if opts.Started != nil {
		opts.Started()
	}
	killGroup := func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }

	var statusLines []string
	var statusWG sync.WaitGroup
	if status != nil {
		statusWG.Add(1)
		go func() {
			defer statusWG.Done()
			sc := bufio.NewScanner(status)
			for sc.Scan() {
				statusLines = append(statusLines, sc.Text())
			}
		}()
	}

	done := make(chan struct{})
	var waitErr error
	var waitWG sync.WaitGroup
	waitWG.Add(1)
	go func() {
		defer waitWG.Done()
		waitErr = cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-runCtx.Done():
		killGroup()
		<-done
	}
	waitWG.Wait()
	killGroup() // whatever the shell left behind in its group
	statusWG.Wait()
	dur := time.Since(start)

	res := &Result{
		Stdout:          stdout.String(),
		Stderr:          stderr.String(),
		StdoutTruncated: stdout.truncated,
		StderrTruncated: stderr.truncated,
		DurationMs:      dur.Milliseconds(),
		ExitCode:        exitCode(cmd.ProcessState),
		Signal:          signalName(cmd.ProcessState),
	}
	if runCtx.Err() != nil {
		res.ExitCode = -1
		if errors.Is(context.Cause(runCtx), errRunTimeout) {
			res.TimedOut = true
			return res, contracts.Errorf(contracts.CodeTimeout, "command timed out after %s", timeout)
		}
		return res, contracts.Errorf(contracts.CodeCancelled, "command cancelled: %v", context.Cause(runCtx))
	}
	if status != nil {
		code, ok := bwrapExit(statusLines)
		if !ok {
			return nil, contracts.Errorf(contracts.CodeRuntimeUnavailable, "sandbox did not start: %s", strings.TrimSpace(clipN(stderr.String(), 512)))
		}
		res.ExitCode = code
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) && !errors.Is(waitErr, exec.ErrWaitDelay) {
		return res, contracts.Errorf(contracts.CodeInternalError, "wait: %v", waitErr)
	}
	return res, nil
}

var errRunTimeout = errors.New("exec timeout")

// Probe checks that a sandbox can start here (bwrap present, namespaces
// allowed). Workers call it at start to fail fast; Run fails closed anyway.
func (r *Runner) Probe(ctx context.Context) error {
	p := Policy{Shell: "sh"}
	sh, ok := p.ResolveShell()
	if !ok {
		return contracts.Errorf(contracts.CodeRuntimeUnavailable, "no sh on %s", p.PathEnv())
	}
	res, err := r.Run(ctx, &Plan{Script: "exit 0", Shell: sh, Host: HostSandbox, Path: DefaultPath, TimeoutMs: 10000})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return contracts.Errorf(contracts.CodeRuntimeUnavailable, "sandbox probe exited %d: %s", res.ExitCode, clipN(res.Stderr, 512))
	}
	return nil
}

func (r *Runner) checkPlan(pl *Plan) error {
	if pl == nil {
		return invalidf("no plan")
	}
	if !filepath.IsAbs(pl.Shell) {
		return invalidf("plan shell %q is not absolute", clip(pl.Shell))
	}
	if !executable(pl.Shell) {
		return contracts.Errorf(contracts.CodeRuntimeUnavailable, "shell %q is not an executable file", clip(pl.Shell))
	}
	if pl.Workdir != "" && !filepath.IsAbs(pl.Workdir) {
		return invalidf("plan workdir %q is not absolute", clip(pl.Workdir))
	}
	if pl.TimeoutMs <= 0 {
		return invalidf("plan timeout must be positive")
	}
	for k := range pl.Env {
		if !validEnvName(k) {
			return invalidf("env name %q is not valid", clip(k))
		}
		if why := EnvRefusal(k); why != "" {
			return contracts.Errorf(contracts.CodeDenied, "%s", why)
		}
	}
	for _, d := range pl.Path {
		if !cleanAbs(d) || strings.Contains(d, ":") {
			return invalidf("plan PATH entry %q is not a clean absolute path", clip(d))
		}
	}
	switch pl.Host {
	case HostSandbox:
	case HostWorker:
		if !r.cfg.AllowWorkerHost {
			return contracts.Errorf(contracts.CodeDenied, "host=worker is not allowed on this worker")
		}
	default:
		return invalidf("plan host %q: want sandbox or worker", clip(string(pl.Host)))
	}
	return nil
}

func (r *Runner) bwrapPath() (string, error) {
	if filepath.IsAbs(r.cfg.Bwrap) {
		if !executable(r.cfg.Bwrap) {
			return "", contracts.Errorf(contracts.CodeRuntimeUnavailable, "bubblewrap (%s) is not installed", r.cfg.Bwrap)
		}
		return r.cfg.Bwrap, nil
	}
	p, err := exec.LookPath(r.cfg.Bwrap)
	if err != nil {
		return "", contracts.Errorf(contracts.CodeRuntimeUnavailable, "bubblewrap (%s) is not installed", r.cfg.Bwrap)
	}
	return p, nil
}

// bwrapArgs builds the sandbox: its own user, PID, IPC, UTS, cgroup and
// network namespaces, no capabilities, read-only system paths, a fresh
// /proc, a minimal /dev, a private /tmp, and the workdir as the only
// writable host path.
func (r *Runner) bwrapArgs(pl *Plan, workdir string, env []string) []string {
	args := []string{
		"--die-with-parent", "--new-session",
		"--unshare-user", "--uid", strconv.Itoa(r.cfg.SandboxUID), "--gid", strconv.Itoa(r.cfg.SandboxGID),
		"--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
		"--hostname", "sandbox",
		"--cap-drop", "ALL",
		"--clearenv",
	}
	for _, p := range r.cfg.SandboxReadOnly {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(p); err == nil {
				args = append(args, "--symlink", target, p)
			}
		default:
			args = append(args, "--ro-bind", p, p)
		}
	}
	args = append(args,
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		// fd 4 is the workdir opened without following symbolic links, so
		// a link swapped in after the policy check cannot redirect the
		// only writable bind to another host directory.
		"--bind-fd", "4", workdir, "--chdir", workdir,
		// The root is bwrap's own tmpfs; make it read-only too, so /etc,
		// /var or the workdir's parents are not scratch space.
		"--remount-ro", "/",
	)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, "--setenv", k, v)
	}
	args = append(args, "--json-status-fd", "3", "--", pl.Shell, "-c", pl.Script)
	return args
}

// openNoSymlinks opens dir as an O_PATH descriptor, refusing a symbolic
// link in any component of the path.
func openNoSymlinks(dir string) (*os.File, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		if errors.Is(err, unix.ENOSYS) {
			return nil, contracts.Errorf(contracts.CodeRuntimeUnavailable, "openat2 is not available (Linux 5.6 or later is needed for the sandbox)")
		}
		return nil, contracts.Errorf(contracts.CodeRuntimeUnavailable, "workdir %q: %v (symbolic links are not followed)", clip(dir), err)
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// bwrapExit finds the command's exit code in bwrap's JSON status stream;
// no "exit-code" means the sandbox never ran the command.
func bwrapExit(lines []string) (int, bool) {
	for _, l := range lines {
		_, rest, ok := strings.Cut(l, `"exit-code":`)
		if !ok {
			continue
		}
		rest = strings.TrimSpace(strings.TrimRight(strings.TrimSpace(rest), "}"))
		n, err := strconv.Atoi(strings.TrimSpace(rest))
		if err != nil {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// planEnv is the whole environment of the command: nothing is inherited
// from the worker (its credentials stay out), PATH is fixed, HOME is the
// workdir, and the job's overrides are added in name order.
func planEnv(pl *Plan, workdir string) []string {
	path := strings.Join(pl.Path, ":")
	if path == "" {
		path = strings.Join(DefaultPath, ":")
	}
	env := []string{"PATH=" + path, "HOME=" + workdir, "LANG=C.UTF-8"}
	keys := make([]string, 0, len(pl.Env))
	for k := range pl.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "LANG" {
			env[2] = "LANG=" + pl.Env[k]
			continue
		}
		env = append(env, k+"="+pl.Env[k])
	}
	return env
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func signalName(ps *os.ProcessState) string {
	if ps == nil {
		return ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal().String()
	}
	return ""
}

// capWriter keeps the first max bytes and counts the rest.
type capWriter struct {
	mu        sync.Mutex
	max       int
	buf       []byte
	truncated bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	room := w.max - len(w.buf)
	if room >= len(p) {
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	if room > 0 {
		w.buf = append(w.buf, p[:room]...)
	}
	w.truncated = true
	return len(p), nil
}

// String returns the kept bytes, cut back to a whole UTF-8 sequence when
// the cap fell inside one.
func (w *capWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := w.buf
	if w.truncated {
		for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
			r, size := utf8.DecodeLastRune(b)
			if r != utf8.RuneError || size != 1 {
				break
			}
			b = b[:len(b)-1]
		}
	}
	return string(b)
}

func tee(w *capWriter, extra io.Writer) io.Writer {
	if extra == nil {
		return w
	}
	return io.MultiWriter(w, extra)
}

func clipN(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
