//go:build unix && !linux

package tool

import "syscall"

// dieWithParent is a no-op where the kernel has no parent-death signal: a
// command tool may outlive a crashed baton there.
func dieWithParent(*syscall.SysProcAttr) {}
