// Package workflows holds baton's example workflows, embedded in the binary
// so that `baton serve` and `baton validate` have them with no files on
// disk. Each folder is one workflow (see docs/workflow-format.md) with a
// scripted.json for the scripted provider, so every example runs offline.
package workflows

import "embed"

// FS holds the example workflows: hello/ and generator/ at its root, ready
// for workflow.LoadAll(workflows.FS).
//
// Files embedded with go:embed lose their permission bits; a runner of
// command tools that reads them from FS must write them out with an
// executable mode (in the repository, git keeps the mode of
// hello/tools/get_time).
//
//go:embed hello generator
var FS embed.FS
