package server

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind: every
// stream's reader and writer, the hub, and the engine it drives stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
