package main

import (
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestServe_NonDumpable: runServe's first step leaves the process
// non-dumpable (PR_GET_DUMPABLE 0), so a same-user child cannot read its
// /proc/<pid>/environ. Checked in a child test process, which the flag
// would otherwise outlive this one's other tests in.
func TestServe_NonDumpable(t *testing.T) {
	if os.Getenv("BATON_TEST_DUMPABLE_CHILD") == "1" {
		// A --dev server on a public address is refused after the flag is
		// set, before anything is opened.
		if err := runServe(t.Context(), serveConfig{dev: true, addr: "0.0.0.0:0"}, io.Discard, io.Discard); err == nil {
			t.Fatal("runServe: --dev on 0.0.0.0 accepted")
		}
		d, err := dumpable()
		if err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("dumpable=" + string(rune('0'+d)) + "\n")
		return
	}
	if d, err := dumpable(); err != nil || d != 1 {
		t.Skipf("this process is not dumpable to begin with (%d, %v)", d, err)
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestServe_NonDumpable$", "-test.count=1")
	cmd.Env = append(os.Environ(), "BATON_TEST_DUMPABLE_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "dumpable=0") {
		t.Fatalf("the child is still dumpable:\n%s", out)
	}
}
