//go:build unix

package producer_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time (user and system) this test process has used,
// the embedded server's included.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
