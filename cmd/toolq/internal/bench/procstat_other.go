//go:build !linux

package bench

import "time"

// pidCPU is measured on Linux only.
func pidCPU(int) (time.Duration, bool) { return 0, false }

// machineCPU is measured on Linux only.
func machineCPU() (busy, total time.Duration, ok bool) { return 0, 0, false }
