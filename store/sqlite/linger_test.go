package sqlite

import (
	"testing"
	"time"
)

// TestLingerFor is the writer's rule for the commit delay: no wait for a
// lone write, nor after a lone write, nor for a batch of lingerBelow or
// more; otherwise as long as the previous commit took, at most the delay.
func TestLingerFor(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name        string
		n, prevN    int
		prevCommit  time.Duration
		delay, want time.Duration
	}{
		{"a lone write", 1, 8, 5 * ms, ms, 0},
		{"after a lone write", 8, 1, 5 * ms, ms, 0},
		{"no previous batch", 8, 0, 0, ms, 0},
		{"two in a row", 2, 2, 5 * ms, ms, ms},
		{"bounded by the previous commit", 4, 4, ms / 4, ms, ms / 4},
		{"bounded by the delay", 4, 4, time.Hour, ms, ms},
		{"an hour's delay, a quick commit", 4, 4, 300 * time.Microsecond, time.Hour, 300 * time.Microsecond},
		{"the largest batch that waits", lingerBelow - 1, 100, 5 * ms, ms, ms},
		{"a batch large enough", lingerBelow, 100, 5 * ms, ms, 0},
		{"the delay off", 4, 4, 5 * ms, 0, 0},
	} {
		if got := lingerFor(tc.n, tc.prevN, tc.prevCommit, tc.delay); got != tc.want {
			t.Errorf("%s: lingerFor(%d, %d, %v, %v) = %v; want %v", tc.name, tc.n, tc.prevN, tc.prevCommit, tc.delay, got, tc.want)
		}
	}
}
