package main

import (
	"os"
	"testing"
)

// envRunMain makes the test binary act as the baton command, so that tests
// can run it as a child process (on a pseudo-terminal) without building it.
const envRunMain = "BATON_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}
