package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestChat_MemoryStore runs `baton chat hello` on the memory store: the
// whole runtime (engine, recorder, inbox, usage) on mem:, to the end.
func TestChat_MemoryStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"chat", "--store", "mem:", "--data-dir", t.TempDir(), "hello"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{
		"Greeter: Hello! I checked the clock in UTC for you. Have a wonderful day!",
		"✓ chat complete (success: TerminateTarget reached)",
		"tokens: 290 in, 38 out",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// A memory store is one process's: instances cannot share it, and
// --instance-id with mem: is refused before anything starts.
func TestChat_MemoryStoreNotShared(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"chat", "--store", "mem:", "--instance-id", "a", "--data-dir", t.TempDir(), "hello"}, &out, &errb)
	if code == 0 || !strings.Contains(errb.String(), "--instance-id") || !strings.Contains(errb.String(), "mem:") {
		t.Fatalf("exit %d, stderr %q; want a failure naming --instance-id and mem:", code, errb.String())
	}
}
