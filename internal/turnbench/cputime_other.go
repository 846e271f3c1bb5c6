//go:build !unix

package turnbench

import "time"

// CPUTime returns 0 where getrusage(2) is missing: the benchmark's CPU
// figures are unknown there (turns/s and latency are still measured).
func CPUTime() time.Duration { return 0 }
