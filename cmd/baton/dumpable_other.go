//go:build !linux

package main

// nonDumpable does nothing where the system is not Linux: the protection of
// /proc/<pid>/environ it gives there has no portable equivalent.
func nonDumpable() error { return nil }
