package tool_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonhq/baton/tool"
)

// TestCommandTool_SymlinkOutOfTheFolder: a command tool whose file is a
// symbolic link to a program outside the workflow folder (/bin/sh) is
// refused when the registry is built; a link inside the folder works.
func TestCommandTool_SymlinkOutOfTheFolder(t *testing.T) {
	dir := t.TempDir()
	tools := filepath.Join(dir, "tools")
	if err := os.MkdirAll(tools, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tools, "ok.sh"), []byte("#!/bin/sh\necho '{}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"shell": "/bin/sh", "alias": "ok.sh"} {
		if err := os.Symlink(target, filepath.Join(tools, name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tool.New(dir, []tool.Spec{{Agent: "A", Name: "sh", File: "shell"}}, tool.WithLogger(quiet)); err == nil || !strings.Contains(err.Error(), "outside the workflow folder") {
		t.Fatalf("a link to /bin/sh: %v, want refused", err)
	}
	r, err := tool.New(dir, []tool.Spec{{Agent: "A", Name: "ok", File: "alias"}}, tool.WithLogger(quiet))
	if err != nil {
		t.Fatalf("a link inside the folder: %v", err)
	}
	_ = r.Close()
}
