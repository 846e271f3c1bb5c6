//go:build unix

package workflow_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/workflow"
	"github.com/batonhq/baton/workflows"
)

// BenchmarkLoadExamples measures loading and validating every embedded
// example workflow (target: under 5 ms). Besides wall time it reports the
// process's CPU time per load (cpu-ms/load, GC included), which stays
// meaningful on a machine shared with other work.
func BenchmarkLoadExamples(b *testing.B) {
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		ws, err := workflow.LoadAll(workflows.FS)
		if err != nil || len(ws) != 2 {
			b.Fatal(err)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/n, "ms/load")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/n, "cpu-ms/load")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
