package server

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// stream's reader and writer, the hub, and the engine it drives stop. Run
// as the child of TestA2AToolKill, it is the calling baton instead.
func TestMain(m *testing.M) {
	if os.Getenv(a2aKillChildEnv) != "" {
		os.Exit(runA2AKillChild())
	}
	goleak.VerifyTestMain(m)
}
