package main

import (
	"os"
	"testing"

	"github.com/batonhq/baton/internal/turnbench"
)

// envRunMain makes the test binary act as the baton command, so that tests
// can run it as a child process (on a pseudo-terminal) without building it.
const envRunMain = "BATON_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	// `baton bench --served` in a test starts this binary as its server
	// (os.Executable); main runs the server when it sees turnbench.ServerEnv.
	if os.Getenv(envRunMain) == "1" || os.Getenv(turnbench.ServerEnv) != "" {
		main()
		return
	}
	os.Exit(m.Run())
}
