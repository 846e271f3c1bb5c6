package mem_test

import (
	"testing"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/store/mem"
	"github.com/batonhq/baton/store/storetest"
)

// TestConformance runs the store conformance suite (all of it: a memory
// store has no crash to survive, so the crash tests do not apply).
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) baton.Store {
		s := mem.New()
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestTwoWriters: two goroutines' worth of appenders on one store (one
// process: the only sharing a memory store has) leave sequences 1..n.
func TestTwoWriters(t *testing.T) {
	s := mem.New()
	defer s.Close()
	storetest.RunTwoWriters(t, s, s)
}

func TestStats(t *testing.T) {
	s := mem.New()
	defer s.Close()
	storetest.RunStats(t, s)
}
