package shell

import (
	"encoding/binary"
	"fmt"
	"sync"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// SeccompKilled are the system calls whose use kills the sandboxed process
// (SIGSYS, reported as a denied run): new namespaces, mounts, tracing other
// processes, kernel keyrings, BPF, userfaultfd, perf events, kexec, kernel
// modules and a few host-wide switches. None is needed by the commands an
// agent runs, and each has been the way out of a container. Names a
// platform lacks are left out.
var SeccompKilled = []string{
	"unshare", "setns",
	"mount", "umount", "umount2", "pivot_root", "chroot",
	"open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
	"keyctl", "add_key", "request_key",
	"bpf", "userfaultfd", "perf_event_open",
	"kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module",
	"open_by_handle_at", "name_to_handle_at",
	"swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd", "syslog",
	"iopl", "ioperm", "uselib", "lookup_dcookie", "vhangup",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
}

// cloneNamespaceFlags are clone's flags that make a new namespace.
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWTIME

// seccompAllowAll is a filter that allows everything (tests only).
var seccompAllowAll = binary.NativeEndian.AppendUint32([]byte{0x06, 0, 0, 0}, uint32(seccomp.ActionAllow))

// seccompProgram returns the sandbox's seccomp filter as the raw
// struct sock_filter array bwrap reads from --seccomp FD. Built once.
var seccompProgram = sync.OnceValues(buildSeccomp)

func buildSeccomp() ([]byte, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	var killed []string
	for _, n := range SeccompKilled {
		if _, ok := info.SyscallNames[n]; ok {
			killed = append(killed, n)
		}
	}
	pol := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionKillProcess, Names: killed},
			{
				// clone's flags are its first argument on the platforms
				// toolq builds for; a new namespace is refused like unshare.
				Action: seccomp.ActionKillProcess,
				NamesWithCondtions: []seccomp.NameWithConditions{{
					Name:       "clone",
					Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: cloneNamespaceFlags}},
				}},
			},
			{
				// Typing into the terminal of the worker is not the
				// command's business (TIOCSTI, TIOCLINUX).
				Action: seccomp.ActionErrno,
				NamesWithCondtions: []seccomp.NameWithConditions{
					{Name: "ioctl", Conditions: seccomp.ArgumentConditions{{Argument: 1, Operation: seccomp.Equal, Value: unix.TIOCSTI}}},
					{Name: "ioctl", Conditions: seccomp.ArgumentConditions{{Argument: 1, Operation: seccomp.Equal, Value: unix.TIOCLINUX}}},
				},
			},
		},
	}
	if _, ok := info.SyscallNames["clone3"]; ok {
		// clone3's flags sit in memory a filter cannot read. ENOSYS makes
		// libc fall back to clone, whose flags it can.
		pol.Syscalls = append(pol.Syscalls, seccomp.SyscallGroup{
			Action: seccomp.Action(uint32(seccomp.ActionErrno) | uint32(unix.ENOSYS)), Names: []string{"clone3"},
		})
	}
	insns, err := pol.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	// The library lets a foreign calling convention (the i386 ABI through
	// int 0x80 on x86-64) through with the default action, which would
	// allow every call above. Kill it first instead.
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionKillProcess)},
	}
	raw, err := bpf.Assemble(append(guard, insns...))
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, in := range raw {
		out = binary.NativeEndian.AppendUint16(out, in.Op)
		out = append(out, in.Jt, in.Jf)
		out = binary.NativeEndian.AppendUint32(out, in.K)
	}
	return out, nil
}
