//go:build unix

package storetest

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time the process has used, user and system, and
// whether it could tell.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
