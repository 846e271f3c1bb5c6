package baton_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestImportGraph: the server and metrics speak the root package's
// vocabulary (events, payloads, envelopes, the Recorder and StartOptions)
// and reach the engine only through interfaces, so neither depends on
// package engine, directly or through another package; and the server
// uses package metrics only through its exported API, never a package
// under it. Test files may import anything.
func TestImportGraph(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to read the import graph: %v", err)
	}
	const mod = "github.com/batonhq/baton"
	for _, c := range []struct {
		pkg       string
		forbidden []string // import paths, or prefixes ending in "/"
	}{
		{"./server", []string{mod + "/engine", mod + "/metrics/"}},
		{"./metrics", []string{mod + "/engine"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := exec.CommandContext(ctx, goCmd, "list", "-deps", "-f", "{{.ImportPath}}", c.pkg).Output()
		cancel()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("go list -deps %s: %v\n%s", c.pkg, err, stderr)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 2 {
			t.Fatalf("go list -deps %s listed %q: no dependencies read", c.pkg, deps)
		}
		for _, dep := range deps {
			for _, f := range c.forbidden {
				if dep == f || strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f) {
					t.Errorf("%s depends on %s", c.pkg, dep)
				}
			}
		}
	}
}
