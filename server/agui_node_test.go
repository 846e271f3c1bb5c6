package server

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The AG-UI reference checks: @ag-ui/core's zod schemas and @ag-ui/client's
// HttpAgent (its event verification), run by node on
// testdata/agui/check.mjs. .ci/run installs the packages; without node or
// them a test skips, but never in CI.

const aguiNodeDir = "testdata/agui"

// aguiNode returns the node binary with the AG-UI packages installed next
// to check.mjs.
func aguiNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(aguiNodeDir, "node_modules", "@ag-ui", "client", "package.json"))
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("AG-UI checks need node and the packages of %s (npm install there; .ci/run does): %v", aguiNodeDir, err)
		}
		t.Skipf("AG-UI checks need node and the packages of %s (npm install --prefix %s): %v", aguiNodeDir, aguiNodeDir, err)
	}
	return node
}

// runNode runs check.mjs with args and stdin, failing the test on a
// non-zero exit with its stderr.
func runNode(t *testing.T, stdin []byte, args ...string) []byte {
	t.Helper()
	node := aguiNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append([]string{"check.mjs"}, args...)...)
	cmd.Dir = aguiNodeDir
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node check.mjs %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// checkAGUISchema validates every event of res against @ag-ui/core.
func checkAGUISchema(t *testing.T, res aguiResult) {
	t.Helper()
	raw := append([]byte{'['}, bytes.Join(res.raw, []byte{','})...)
	raw = append(raw, ']')
	out := runNode(t, raw, "schema")
	var got struct{ Checked int }
	if err := json.Unmarshal(out, &got); err != nil || got.Checked != len(res.raw) {
		t.Fatalf("schema check: %s (%v), want %d events checked", out, err, len(res.raw))
	}
}
