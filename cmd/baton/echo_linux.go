package main

import (
	"syscall"
	"unsafe"
)

// echoOff turns the terminal's echo off before a secret's prompt is
// printed, so that what is typed ahead of the read is not shown either
// (term.ReadPassword turns it off only once it starts reading).
func echoOff(fd int) error {
	var t syscall.Termios
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TCGETS, uintptr(unsafe.Pointer(&t))); errno != 0 {
		return errno
	}
	t.Lflag &^= syscall.ECHO
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TCSETS, uintptr(unsafe.Pointer(&t))); errno != 0 {
		return errno
	}
	return nil
}
