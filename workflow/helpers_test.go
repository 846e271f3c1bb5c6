package workflow_test

import (
	"os"
	"testing"

	"github.com/batonhq/baton/workflow"
	"github.com/batonhq/baton/workflows"
)

func loadFixture(t testing.TB, name string) *workflow.Workflow {
	t.Helper()
	w, err := workflow.Load(os.DirFS("testdata/valid"), name)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func loadExampleWorkflow(t testing.TB, name string) *workflow.Workflow {
	t.Helper()
	w, err := workflow.Load(workflows.FS, name)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
