//go:build !unix

package bench

import "time"

// processCPU is not measured here: cpu_per_job is then 0.
func processCPU() time.Duration { return 0 }
