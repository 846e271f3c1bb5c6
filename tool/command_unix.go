//go:build unix

package tool

import (
	"errors"
	"os/exec"
	"syscall"
)

// startOwnGroup makes the command the leader of a new process group, so that
// killing the group ends the children it started too; where the system can,
// the command also dies with baton (see dieWithParent).
func startOwnGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(cmd.SysProcAttr)
}

// killGroup kills the command's whole process group.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
