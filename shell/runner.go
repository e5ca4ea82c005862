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
	// Limits bound each sandboxed run (processes, memory, file size, CPU,
	// descriptors, /tmp, workdir growth; only the last applies on the
	// worker host too); zero fields take the defaults.
	Limits Limits
	// CgroupParent is a cgroup v2 directory delegated to the worker (pids
	// and memory in its cgroup.subtree_control) where each sandboxed run
	// gets a child cgroup; empty means the worker's own cgroup when it
	// allows that, else writable cgroup v1 pids and memory hierarchies;
	// CgroupOff means none (rlimits only).
	CgroupParent string
}

// Runner runs plans. It is safe for concurrent use.
type Runner struct {
	cfg     RunnerConfig
	cgroups cgroupRoots
	// noSeccomp leaves the filter out, so tests can show that the other
	// layers hold on their own.
	noSeccomp bool
	// workdirEntries is how many files and directories a run may add to
	// its workdir before the watchdog stops it (workdirGrowthEntries).
	workdirEntries int
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
	c.Limits = c.Limits.withDefaults()
	sealInheritedFDs.Do(sealFDs)
	return &Runner{cfg: c, cgroups: detectCgroups(c.CgroupParent), workdirEntries: workdirGrowthEntries}, nil
}

// Cgroups says how a sandboxed run's processes and memory are capped:
// "cgroup v2", "cgroup v1" or "none" (rlimits only), with why when none.
func (r *Runner) Cgroups() (mode, note string) { return r.cgroups.mode, r.cgroups.detectNote }

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
	var status, block *os.File // bwrap's status stream; the write end of its --block-fd
	var cg *runCgroups
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
		defer pw.Close()
		status = pr
		filter, err := seccompFile(r.noSeccomp)
		if err != nil {
			return nil, contracts.Errorf(contracts.CodeRuntimeUnavailable, "%v", err)
		}
		defer filter.Close()
		br, bw2, err := os.Pipe()
		if err != nil {
			return nil, contracts.Errorf(contracts.CodeInternalError, "pipe: %v", err)
		}
		defer br.Close()
		defer bw2.Close()
		block = bw2
		cg, err = newRunCgroups(&r.cgroups, r.cfg.Limits)
		if err != nil {
			return nil, contracts.Errorf(contracts.CodeRuntimeUnavailable, "sandbox limits: %v", err)
		}
		defer cg.remove()
		cmd = exec.Command(bw, r.bwrapArgs(plan, workdir, env)...)
		cmd.Env = []string{} // the sandbox gets its env through --setenv only
		cmd.ExtraFiles = []*os.File{pw, wd, filter, br}
	}
	// The workdir's size before the run, for its growth cap. The walk
	// starts at the resolved directory: the sandbox has refused symbolic
	// links already, and on the worker host cmd.Dir follows them.
	var ww *workdirWatch
	if r.cfg.Limits.WorkdirBytes > 0 {
		root, err := filepath.EvalSymlinks(workdir)
		if err != nil {
			return nil, contracts.Errorf(contracts.CodeRuntimeUnavailable, "workdir %q: %v", clip(workdir), err)
		}
		var why string
		if ww, why = newWorkdirWatch(root, r.cfg.Limits.WorkdirBytes, r.workdirEntries); why != "" {
			return nil, contracts.Errorf(contracts.CodeDenied, "sandbox limit: %s", why)
		}
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
	pgid := cmd.Process.Pid
	killGroup := func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }

	var statusLines []string
	var statusWG sync.WaitGroup
	childPid := make(chan int, 1)
	if status != nil {
		// The write ends belong to bwrap now; keep ours closed so reading
		// the status stream ends when bwrap exits.
		for _, f := range cmd.ExtraFiles {
			_ = f.Close()
		}
		statusWG.Add(1)
		go func() {
			defer statusWG.Done()
			defer close(childPid)
			sc := bufio.NewScanner(status)
			sent := false
			for sc.Scan() {
				statusLines = append(statusLines, sc.Text())
				if pid, ok := bwrapChildPid(sc.Text()); ok && !sent {
					childPid <- pid
					sent = true
				}
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

	var setupErr error
	if status != nil {
		// The sandbox's first process waits on --block-fd until its limits
		// are set: rlimits on it and its cgroups, inherited by the command.
		select {
		case pid, ok := <-childPid:
			if ok {
				setupErr = setRlimits(pid, r.cfg.Limits, plan.TimeoutMs, cg)
				if setupErr == nil {
					setupErr = cg.add(pid)
				}
				if setupErr != nil {
					killGroup() // before unblocking: it must not run unlimited
				} else {
					_, _ = block.Write([]byte{1})
				}
			}
		case <-done:
		case <-runCtx.Done():
			killGroup()
		}
		_ = block.Close()
	}
	if opts.Started != nil && setupErr == nil {
		opts.Started()
	}

	// A run that reaches a cgroup cap is stopped at once rather than left
	// spinning against it until its timeout.
	var limitHit string
	var watchWG sync.WaitGroup
	if cg != nil && len(cg.dirs()) > 0 && setupErr == nil {
		watchWG.Add(1)
		go func() {
			defer watchWG.Done()
			t := time.NewTicker(50 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					if why := cg.hit(r.cfg.Limits); why != "" {
						limitHit = why
						killGroup()
						return
					}
				}
			}
		}()
	}
	// A run whose workdir grows past its cap is stopped the same way.
	var workdirHit string
	if ww != nil && setupErr == nil {
		watchWG.Add(1)
		go func() {
			defer watchWG.Done()
			ww.watch(done, func(why string) {
				workdirHit = why
				killGroup()
			})
		}()
	}
	select {
	case <-done:
	case <-runCtx.Done():
		killGroup()
		<-done
	}
	waitWG.Wait()
	watchWG.Wait()
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
	if setupErr != nil {
		return nil, contracts.Errorf(contracts.CodeRuntimeUnavailable, "sandbox limits not applied: %v", setupErr)
	}
	if cg != nil && limitHit == "" {
		limitHit = cg.hit(r.cfg.Limits)
	}
	if ww != nil && workdirHit == "" {
		// A command that wrote past the cap and ended within one poll.
		if why := ww.over(); why != "" {
			workdirHit = why + " (found when the command ended)"
		}
	}
	if workdirHit != "" {
		limitHit = strings.Join(nonEmpty(limitHit, workdirHit), "; ")
	}
	if limitHit != "" {
		res.ExitCode = -1
		return res, contracts.Errorf(contracts.CodeDenied, "sandbox limit: %s; the command was stopped", limitHit)
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
		if code > 128 {
			if why := signalLimit(syscall.Signal(code-128), r.cfg.Limits); why != "" {
				res.Signal = syscall.Signal(code - 128).String()
				return res, contracts.Errorf(contracts.CodeDenied, "sandbox limit: %s; the command was stopped", why)
			}
		}
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
		// --disable-userns: the command cannot make a user namespace of
		// its own, where it would be root again (the seccomp filter
		// refuses unshare and namespace flags of clone as well).
		"--unshare-user", "--disable-userns", "--uid", strconv.Itoa(r.cfg.SandboxUID), "--gid", strconv.Itoa(r.cfg.SandboxGID),
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
	args = append(args, "--proc", "/proc", "--dev", "/dev")
	if r.cfg.Limits.TmpBytes > 0 {
		args = append(args, "--size", strconv.FormatInt(r.cfg.Limits.TmpBytes, 10))
	}
	args = append(args, "--tmpfs", "/tmp",
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
	// fd 5 is the seccomp filter (seccompProgram); fd 6 blocks the
	// sandbox until its limits are set.
	args = append(args, "--seccomp", "5", "--block-fd", "6", "--json-status-fd", "3", "--", pl.Shell, "-c", pl.Script)
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

// bwrapChildPid reads the sandbox's first process from bwrap's first
// status line.
func bwrapChildPid(line string) (int, bool) {
	_, rest, ok := strings.Cut(line, `"child-pid":`)
	if !ok {
		return 0, false
	}
	rest = strings.TrimSpace(rest)
	end := strings.IndexAny(rest, ",} ")
	if end < 0 {
		end = len(rest)
	}
	n, err := strconv.Atoi(rest[:end])
	return n, err == nil && n > 0
}

// seccompFile returns the seccomp filter in a memory file for bwrap.
func seccompFile(allowAll bool) (*os.File, error) {
	prog, err := seccompProgram()
	if err != nil {
		return nil, err
	}
	if allowAll {
		prog = seccompAllowAll
	}
	fd, err := unix.MemfdCreate("toolq-seccomp", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("seccomp: memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "toolq-seccomp")
	if _, err := f.Write(prog); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	return f, nil
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

func nonEmpty(s ...string) []string {
	var out []string
	for _, v := range s {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}
