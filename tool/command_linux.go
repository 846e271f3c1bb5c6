package tool

import "syscall"

// dieWithParent has the kernel kill a command tool when the baton process
// that started it dies. A command runs in its own process group (so its
// timeout can kill its children), so it would otherwise outlive a crashed
// baton and go on with a cut stdin, its result lost; killed, the call is
// run again after the restart with the same effect key.
func dieWithParent(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGKILL }
