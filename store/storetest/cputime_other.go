//go:build !unix

package storetest

import "time"

// cpuTime returns the CPU time the process has used; not known here.
func cpuTime() (time.Duration, bool) { return 0, false }
