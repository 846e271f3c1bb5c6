package metrics_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the collector's and the tracer's goroutines (and
// everything the tests start) are gone when the tests end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
