package shell

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limits bound what one sandboxed command may use. A zero field takes its
// default; a negative one turns that limit off.
type Limits struct {
	// Processes caps the run's processes and threads: pids.max of its
	// cgroup. Without a pids cgroup it falls back to RLIMIT_NPROC, which
	// counts every process of the worker's user (not only this run's) and
	// which the kernel does not apply to a worker running as root.
	Processes int
	// MemoryBytes caps memory: memory.max (v2) or memory.limit_in_bytes
	// (v1) of the run's cgroup, where the kernel kills the run on excess.
	// Without a memory cgroup it caps each process's address space
	// (RLIMIT_AS), where allocations beyond it fail instead.
	MemoryBytes int64
	// FileBytes caps the size of any file a process writes (RLIMIT_FSIZE;
	// the writer gets SIGXFSZ). It bounds each file in the workdir, not
	// their total: a bind mount has no size of its own (WorkdirBytes).
	FileBytes int64
	// WorkdirBytes caps how much a run may add to its workdir: the sum of
	// its regular files' sizes, against the sum before the run. A watchdog
	// walks the workdir every 200 ms and stops the run past the cap (as it
	// does a run that adds 100000 files and directories, where the walk
	// stops counting), so a run can overshoot by what it writes in one
	// interval, each file bounded by FileBytes. It is not a quota: for a
	// hard bound put workdir roots on a filesystem with a quota or a size.
	// It applies on both hosts.
	WorkdirBytes int64
	// CPUSeconds caps each process's CPU time (RLIMIT_CPU: SIGXCPU, then
	// SIGKILL); 0 means the plan's timeout.
	CPUSeconds int64
	// OpenFiles caps descriptors per process (RLIMIT_NOFILE).
	OpenFiles int64
	// TmpBytes is the size of the sandbox's private /tmp (tmpfs size=).
	TmpBytes int64
}

// Limit defaults.
const (
	DefaultProcesses    = 256
	DefaultMemoryBytes  = 2 << 30
	DefaultFileBytes    = 1 << 30
	DefaultWorkdirBytes = 1 << 30
	DefaultOpenFiles    = 1024
	DefaultTmpBytes     = 256 << 20
)

func (l Limits) withDefaults() Limits {
	def := func(v, d int64) int64 {
		if v == 0 {
			return d
		}
		return v
	}
	if l.Processes == 0 {
		l.Processes = DefaultProcesses
	}
	l.MemoryBytes = def(l.MemoryBytes, DefaultMemoryBytes)
	l.FileBytes = def(l.FileBytes, DefaultFileBytes)
	l.WorkdirBytes = def(l.WorkdirBytes, DefaultWorkdirBytes)
	l.OpenFiles = def(l.OpenFiles, DefaultOpenFiles)
	l.TmpBytes = def(l.TmpBytes, DefaultTmpBytes)
	return l
}

// cgroupRoots are where a run's cgroups are made: one cgroup v2 directory
// with pids and memory enabled for its children, or v1 pids and memory
// hierarchies, each optional.
type cgroupRoots struct {
	v2         string
	pids, mem  string // v1
	mode       string // for logs and the probe: "cgroup v2", "cgroup v1", "none"
	detectNote string
}

// CgroupOff as RunnerConfig.CgroupParent turns cgroup limits off.
const CgroupOff = "off"

// detectCgroups finds where this process may make child cgroups: parent
// when set (a cgroup v2 directory delegated to the worker, with pids and
// memory in its cgroup.subtree_control), else the worker's own cgroup when
// it allows that, else writable v1 pids and memory hierarchies.
func detectCgroups(parent string) cgroupRoots {
	switch parent {
	case CgroupOff:
		return cgroupRoots{mode: "none", detectNote: "cgroups turned off"}
	case "":
	default:
		if err := v2Usable(parent); err != nil {
			return cgroupRoots{mode: "none", detectNote: err.Error()}
		}
		return cgroupRoots{v2: parent, mode: "cgroup v2"}
	}
	own := map[string]string{}
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return cgroupRoots{mode: "none", detectNote: err.Error()}
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			own[c] = parts[2]
		}
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		dir := filepath.Join("/sys/fs/cgroup", own[""])
		if err := v2Usable(dir); err != nil {
			return cgroupRoots{mode: "none", detectNote: err.Error()}
		}
		return cgroupRoots{v2: dir, mode: "cgroup v2"}
	}
	var r cgroupRoots
	if p, ok := own["pids"]; ok && v1Usable(filepath.Join("/sys/fs/cgroup/pids", p)) {
		r.pids = filepath.Join("/sys/fs/cgroup/pids", p)
	}
	if p, ok := own["memory"]; ok && v1Usable(filepath.Join("/sys/fs/cgroup/memory", p)) {
		r.mem = filepath.Join("/sys/fs/cgroup/memory", p)
	}
	r.mode = "none"
	if r.pids != "" || r.mem != "" {
		r.mode = "cgroup v1"
	}
	return r
}

func v2Usable(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control")) //nolint:gosec // G304: the cgroup directory is the operator's or the runner's own
	if err != nil {
		return fmt.Errorf("cgroup v2 %s: %w", dir, err)
	}
	ctl := strings.Fields(string(b))
	if !containsAll(ctl, "pids", "memory") {
		return fmt.Errorf("cgroup v2 %s does not delegate pids and memory to its children (cgroup.subtree_control: %q)", dir, strings.TrimSpace(string(b)))
	}
	return probeMkdir(dir)
}

func v1Usable(dir string) bool { return probeMkdir(dir) == nil }

func probeMkdir(dir string) error {
	p := filepath.Join(dir, "toolq-probe-"+randHex())
	if err := os.Mkdir(p, 0o755); err != nil { //nolint:gosec // G301: cgroup directories are made 0755
		return fmt.Errorf("cgroup %s is not writable: %w", dir, err)
	}
	return os.Remove(p)
}

func containsAll(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}

func randHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// runCgroups are one run's cgroup directories.
type runCgroups struct {
	v2, pids, mem string
}

// newRunCgroups makes the run's cgroups with lim's process and memory
// caps. Nothing is made when roots has none.
func newRunCgroups(roots *cgroupRoots, lim Limits) (*runCgroups, error) {
	rc := &runCgroups{}
	name := "toolq-exec-" + randHex()
	mk := func(root string, files map[string]string) (string, error) {
		if root == "" {
			return "", nil
		}
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o755); err != nil { //nolint:gosec // G301: cgroup directories are made 0755
			return "", err
		}
		for f, v := range files {
			if v == "" {
				continue
			}
			if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o600); err != nil {
				_ = os.Remove(dir)
				return "", fmt.Errorf("%s: %w", f, err)
			}
		}
		return dir, nil
	}
	procs, mem := "", ""
	if lim.Processes > 0 {
		procs = strconv.Itoa(lim.Processes)
	}
	if lim.MemoryBytes > 0 {
		mem = strconv.FormatInt(lim.MemoryBytes, 10)
	}
	var err error
	if roots.v2 != "" {
		rc.v2, err = mk(roots.v2, map[string]string{"pids.max": procs, "memory.max": mem})
		if err == nil && mem != "" {
			// No swap either, when the host has the knob.
			_ = os.WriteFile(filepath.Join(rc.v2, "memory.swap.max"), []byte("0"), 0o600)
		}
		if err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		return rc, nil
	}
	if rc.pids, err = mk(roots.pids, map[string]string{"pids.max": procs}); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	if rc.mem, err = mk(roots.mem, map[string]string{"memory.limit_in_bytes": mem}); err != nil {
		rc.remove()
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	if rc.mem != "" && mem != "" {
		_ = os.WriteFile(filepath.Join(rc.mem, "memory.memsw.limit_in_bytes"), []byte(mem), 0o600)
	}
	return rc, nil
}

func (rc *runCgroups) dirs() []string {
	var out []string
	for _, d := range []string{rc.v2, rc.pids, rc.mem} {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

// hasPids and hasMemory report which caps the cgroups enforce.
func (rc *runCgroups) hasPids() bool   { return rc.v2 != "" || rc.pids != "" }
func (rc *runCgroups) hasMemory() bool { return rc.v2 != "" || rc.mem != "" }

// add moves pid into the run's cgroups.
func (rc *runCgroups) add(pid int) error {
	for _, d := range rc.dirs() {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o600); err != nil {
			return fmt.Errorf("cgroup: add %d to %s: %w", pid, d, err)
		}
	}
	return nil
}

// hit says which cgroup cap the run reached, if any.
func (rc *runCgroups) hit(lim Limits) string {
	var why []string
	if d := firstOf(rc.v2, rc.pids); d != "" && eventCount(filepath.Join(d, "pids.events"), "max") > 0 {
		why = append(why, fmt.Sprintf("process limit of %d reached", lim.Processes))
	}
	switch {
	case rc.v2 != "" && eventCount(filepath.Join(rc.v2, "memory.events"), "oom_kill") > 0,
		rc.mem != "" && eventCount(filepath.Join(rc.mem, "memory.oom_control"), "oom_kill") > 0:
		why = append(why, fmt.Sprintf("memory limit of %d bytes reached (killed)", lim.MemoryBytes))
	}
	return strings.Join(why, "; ")
}

// remove kills whatever is left in the run's cgroups and removes them.
func (rc *runCgroups) remove() {
	for _, d := range rc.dirs() {
		for range 50 {
			killCgroup(d)
			if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func killCgroup(dir string) {
	if os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o600) == nil {
		return
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")) //nolint:gosec // G304: as above
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// eventCount reads "key N" from a cgroup key-value file.
func eventCount(path, key string) int64 {
	b, err := os.ReadFile(path) //nolint:gosec // G304: a file of the run's own cgroup
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// setRlimits applies lim to pid (the sandbox's first process, before it
// starts the command; everything it starts inherits them). RLIMIT_AS and
// RLIMIT_NPROC only stand in for a missing memory or pids cgroup.
func setRlimits(pid int, lim Limits, timeoutMs int64, rc *runCgroups) error {
	set := func(res int, v int64) error {
		if v <= 0 {
			return nil
		}
		rl := unix.Rlimit{Cur: uint64(v), Max: uint64(v)}
		if err := unix.Prlimit(pid, res, &rl, nil); err != nil {
			return fmt.Errorf("prlimit %d: %w", res, err)
		}
		return nil
	}
	cpu := lim.CPUSeconds
	if cpu == 0 {
		cpu = (timeoutMs + 999) / 1000
	}
	errs := []error{
		set(unix.RLIMIT_FSIZE, lim.FileBytes),
		set(unix.RLIMIT_CPU, cpu),
		set(unix.RLIMIT_NOFILE, lim.OpenFiles),
		// No core files in the workdir.
		unix.Prlimit(pid, unix.RLIMIT_CORE, &unix.Rlimit{}, nil),
	}
	if !rc.hasMemory() {
		errs = append(errs, set(unix.RLIMIT_AS, lim.MemoryBytes))
	}
	if !rc.hasPids() {
		errs = append(errs, set(unix.RLIMIT_NPROC, int64(lim.Processes)))
	}
	return errors.Join(errs...)
}

// signalLimit names the limit behind a command that ended by sig.
func signalLimit(sig syscall.Signal, lim Limits) string {
	switch sig {
	case syscall.SIGXFSZ:
		return fmt.Sprintf("file size limit of %d bytes exceeded", lim.FileBytes)
	case syscall.SIGXCPU:
		return "CPU time limit exceeded"
	case syscall.SIGSYS:
		return "forbidden system call (namespaces, mounts, tracing, kernel keys, BPF and modules are not allowed in the sandbox)"
	}
	return ""
}
