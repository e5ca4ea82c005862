package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"

	"github.com/toolq/toolq/contracts"
	"github.com/toolq/toolq/shell"
	"github.com/toolq/toolq/tools/shellexec"
	"github.com/toolq/toolq/worker"
)

// execFlags configure the approval-gated exec tool of a worker.
type execFlags struct {
	off          bool
	policyFile   string
	approvers    []string
	approverSeed string
	// approversForTenants lets approvers decide tenants' approvals too.
	approversForTenants bool
	limits              execLimitFlags
}

// execLimitFlags are the sandbox's per-run limits; 0 keeps the default,
// -1 turns a limit off.
type execLimitFlags struct {
	procs                              int
	memoryMB, fileMB, workdirMB, tmpMB int64
	cpuSeconds                         int64
	cgroupParent                       string
}

func (f *execFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.off, "no-exec", false, "do not run exec (shell command) jobs on this worker")
	cmd.Flags().StringVar(&f.policyFile, "exec-policy", "",
		`exec policy of this worker: inline JSON, @file or a file path, e.g. {"security":"allowlist","ask":"on-miss","allowlist":["/usr/bin/git"],"safeBins":["jq"]} (default: a small allowlist, ask on-miss, sandbox host)`)
	cmd.Flags().StringSliceVar(&f.approvers, "approver", splitList(os.Getenv("TOOLQ_APPROVERS")),
		"public nkey (U… or A…) of a person whose signed exec decisions are accepted; repeatable (env TOOLQ_APPROVERS, comma-separated)")
	cmd.Flags().BoolVar(&f.approversForTenants, "approvers-for-tenants", false,
		"with --tenants: the --approver keys also decide every tenant's exec approvals (default: a tenant's are decided only by the approvers of its record, tenant register --approver)")
	cmd.Flags().StringVar(&f.approverSeed, "approver-seed", "",
		"development: trust the approver whose nkey seed is in this file, creating it when missing (dev: <data>/approver.seed)")
	l := &f.limits
	cmd.Flags().IntVar(&l.procs, "exec-max-procs", 0, fmt.Sprintf("sandbox: processes and threads per command (pids cgroup; default %d, -1 off)", shell.DefaultProcesses))
	cmd.Flags().Int64Var(&l.memoryMB, "exec-max-memory-mb", 0, fmt.Sprintf("sandbox: memory per command in MiB (memory cgroup, else address space; default %d, -1 off)", shell.DefaultMemoryBytes>>20))
	cmd.Flags().Int64Var(&l.fileMB, "exec-max-file-mb", 0, fmt.Sprintf("sandbox: size of any file a command writes, in MiB (default %d, -1 off)", shell.DefaultFileBytes>>20))
	cmd.Flags().Int64Var(&l.workdirMB, "exec-max-workdir-mb", 0, fmt.Sprintf("exec: how much a command may add to its workdir, in MiB (a watchdog, not a quota; default %d, -1 off)", shell.DefaultWorkdirBytes>>20))
	cmd.Flags().Int64Var(&l.tmpMB, "exec-tmp-mb", 0, fmt.Sprintf("sandbox: size of the private /tmp in MiB (default %d)", shell.DefaultTmpBytes>>20))
	cmd.Flags().Int64Var(&l.cpuSeconds, "exec-cpu-seconds", 0, "sandbox: CPU seconds per process (default: the command's timeout, -1 off)")
	cmd.Flags().StringVar(&l.cgroupParent, "exec-cgroup-parent", "",
		`sandbox: cgroup v2 directory delegated to the worker (pids and memory in its cgroup.subtree_control) for per-command cgroups; "off" for rlimits only (default: detect)`)
}

// runnerLimits turns the limit flags into shell.Limits.
func (l *execLimitFlags) runnerLimits() shell.Limits {
	mb := func(v int64) int64 {
		if v > 0 {
			return v << 20
		}
		return v
	}
	return shell.Limits{
		Processes: l.procs, MemoryBytes: mb(l.memoryMB), FileBytes: mb(l.fileMB), WorkdirBytes: mb(l.workdirMB), TmpBytes: mb(l.tmpMB), CPUSeconds: l.cpuSeconds,
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// devExecPolicy is the default policy: commands resolve to a few harmless
// binaries or stdin-only filters without a person, everything else asks;
// they run in the bubblewrap sandbox, never on the worker host.
func devExecPolicy() shell.Policy {
	p := shell.Policy{
		Security: shell.SecurityAllowlist, Ask: shell.AskOnMiss,
		SafeBins: []string{"grep", "sort", "head", "tail", "wc", "cut", "tr", "uniq", "sha256sum"},
	}
	for _, name := range []string{"echo", "ls", "pwd", "date", "true", "false", "seq", "basename", "dirname"} {
		if path, ok := p.LookPath(name); ok {
			p.Allowlist = append(p.Allowlist, path)
		}
	}
	return p
}

// registerExec adds exec and exec.decide to w unless --no-exec is set.
func registerExec(g *globals, w *worker.Worker, nc *nats.Conn, f *workerFlags) (*shellexec.ShellExec, error) {
	ef := &f.exec
	if ef.off {
		return nil, nil
	}
	pol := devExecPolicy()
	if ef.policyFile != "" {
		data, err := policyArg(ef.policyFile)
		if err != nil {
			return nil, err
		}
		if pol, err = shellexec.DecodePolicy(data); err != nil {
			return nil, contracts.Errorf(contracts.CodeInvalidInput, "--exec-policy %s: %v", ef.policyFile, err)
		}
	}
	approvers := append([]string(nil), ef.approvers...)
	if ef.approverSeed != "" {
		pub, err := ensureSeed(ef.approverSeed)
		if err != nil {
			return nil, err
		}
		approvers = append(approvers, pub)
	}
	if len(approvers) == 0 {
		g.log.Warn("exec: no approvers configured (--approver): commands that need approval can never run")
	}
	rc := shell.RunnerConfig{Limits: ef.limits.runnerLimits(), CgroupParent: ef.limits.cgroupParent}
	if r, err := shell.NewRunner(&rc); err == nil {
		if mode, note := r.Cgroups(); mode == "none" {
			g.log.Warn("exec: no cgroup for sandboxed commands; processes and memory are capped by rlimits only", "why", note)
		}
	}
	scfg := &shellexec.Config{
		Policy: pol, Approvers: approvers, Subjects: g.subjects(), Replicas: f.replicas, Logger: g.log, Runner: rc,
		Tenants: f.tenants, ApproversForTenants: ef.approversForTenants,
	}
	if f.obs != nil {
		scfg.Observer = f.obs.Exec()
	}
	return shellexec.Register(w, nc, scfg)
}

// ensureSeed returns the public key of the user nkey seed in path, creating
// the contract (mode 0600) when the file does not exist.
func ensureSeed(path string) (string, error) {
	if data, err := os.ReadFile(path); err == nil { //nolint:gosec // G304: the operator names the approver seed file
		kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(data))))
		if err != nil {
			return "", contracts.Errorf(contracts.CodeInvalidInput, "approver seed %s: %v", path, err)
		}
		defer kp.Wipe()
		return kp.PublicKey()
	} else if !os.IsNotExist(err) {
		return "", fmt.Errorf("approver seed: %w", err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", err
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, append(seed, '\n'), 0o600); err != nil {
		return "", fmt.Errorf("approver seed: %w", err)
	}
	return kp.PublicKey()
}

// devApproverSeed is the dev bus's approver seed file unless one was given.
func devApproverSeed(f *workerFlags, dataDir string) {
	if f.exec.approverSeed == "" && !f.exec.off {
		f.exec.approverSeed = filepath.Join(dataDir, "approver.seed")
	}
}

// printExecHelp tells a dev user how to try exec and decide approvals.
func printExecHelp(g *globals, f *workerFlags) {
	if f.exec.off {
		return
	}
	fmt.Fprintf(g.stderr, "toolq dev: shell exec:   toolq submit --tool exec --input '{\"command\":\"uname -a\"}'   (asks for approval; the job id is the approval id)\n")
	if f.exec.approverSeed != "" {
		fmt.Fprintf(g.stderr, "toolq dev: decide with   toolq approve <id> --seed-file %s --wait   or   toolq deny <id> --seed-file %s\n", f.exec.approverSeed, f.exec.approverSeed)
	}
}

// policyArg reads --exec-policy: inline JSON (it starts with "{"), @file,
// or a file path.
func policyArg(s string) ([]byte, error) {
	if t := strings.TrimSpace(s); strings.HasPrefix(t, "{") {
		return []byte(t), nil
	}
	path := strings.TrimPrefix(s, "@")
	data, err := os.ReadFile(path) //nolint:gosec // G304: the operator names the policy file
	if err != nil {
		return nil, contracts.Errorf(contracts.CodeInvalidInput, "--exec-policy takes inline JSON, @file or a file path: %v", err)
	}
	return data, nil
}
