package cli

import (
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/toolq/toolq/shell"
)

func TestExecLimitFlags(t *testing.T) {
	t.Parallel()
	cmd := &cobra.Command{Use: "worker"}
	f := &execFlags{}
	f.register(cmd)
	require.NoError(t, cmd.ParseFlags([]string{
		"--exec-max-procs", "64", "--exec-max-memory-mb", "512", "--exec-max-file-mb", "-1",
		"--exec-max-workdir-mb", "8",
		"--exec-tmp-mb", "32", "--exec-cpu-seconds", "60", "--exec-cgroup-parent", "off",
	}))
	require.Equal(t, shell.Limits{Processes: 64, MemoryBytes: 512 << 20, FileBytes: -1, WorkdirBytes: 8 << 20, TmpBytes: 32 << 20, CPUSeconds: 60}, f.limits.runnerLimits())
	require.Equal(t, shell.CgroupOff, f.limits.cgroupParent)
	require.Equal(t, shell.Limits{}, (&execLimitFlags{}).runnerLimits(), "unset flags keep the runner's defaults")
}
