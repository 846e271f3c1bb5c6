package main

import (
	"fmt"
	"syscall"
)

// prSetDumpable and prGetDumpable are prctl(2) options (linux/prctl.h).
const (
	prSetDumpable = 4
	prGetDumpable = 3
)

// nonDumpable makes the process non-dumpable: its /proc/<pid> files
// (environ, mem, maps) become root's, so a command tool or stdio MCP server
// running as the same user cannot read BATON_SECRET_KEY from the
// environment or secrets from memory, nor ptrace the server. It also turns
// core dumps off, which would hold the same secrets.
func nonDumpable() error {
	if _, _, errno := syscall.Syscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", errno)
	}
	return nil
}

// dumpable reports the process's dumpable flag (prctl PR_GET_DUMPABLE).
func dumpable() (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_PRCTL, prGetDumpable, 0, 0)
	if errno != 0 {
		return 0, fmt.Errorf("prctl(PR_GET_DUMPABLE): %w", errno)
	}
	return int(r), nil
}
