// Package testenv gives tests the addresses of the servers they need
// (PostgreSQL, NATS) from the environment. Outside CI a test whose server is
// not configured is skipped; in CI (CI=true) it fails, so that such tests
// never silently skip there. .ci/run starts the servers and sets the
// variables.
//
// It also holds what tests share to wait and to watch: Eventually, the one
// way a test polls for a condition (it fails at its deadline, never ends
// silently), and LogBuffer.
package testenv

import (
	"os"
	"testing"
)

// PostgresDSN returns BATON_TEST_POSTGRES_DSN, skipping or failing the test when unset.
func PostgresDSN(t testing.TB) string { return lookup(t, "BATON_TEST_POSTGRES_DSN") }

// NATSURL returns BATON_TEST_NATS_URL, skipping or failing the test when unset.
func NATSURL(t testing.TB) string { return lookup(t, "BATON_TEST_NATS_URL") }

// InCI reports whether the tests run under CI (CI=true), where nothing may skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// Require skips the test outside CI, and fails it in CI, when ok is false.
func Require(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if InCI() {
		t.Fatalf("%s (this test must not skip in CI)", why)
	}
	t.Skip(why)
}

func lookup(t testing.TB, key string) string {
	t.Helper()
	v := os.Getenv(key)
	Require(t, v != "", key+" is not set")
	return v
}
